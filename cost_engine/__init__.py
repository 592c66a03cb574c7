"""ailedger cost engine: bundles in, reports out."""
