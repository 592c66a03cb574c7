"""One ownership model: owner key + source -> alias -> project -> tenant."""

from __future__ import annotations

from dataclasses import dataclass

from typing import TypeVar

import polars as pl

FrameT = TypeVar("FrameT", pl.DataFrame, pl.LazyFrame)

NO_TENANT = "(no tenant)"


@dataclass(frozen=True)
class Ownership:
    """The resolved alias and owner tables, ready to join onto any frame with owner keys."""

    aliases: pl.DataFrame  # source, key, project
    projects: pl.DataFrame  # project, tenant, display_name, cost_center
    identity: bool  # no ownership tables at all: owner keys are taken as project ids

    @classmethod
    def from_tables(cls, owners: pl.DataFrame, aliases: pl.DataFrame) -> "Ownership":
        projects = owners.select("project", "tenant", "display_name", "cost_center").unique("project", keep="first")
        # A project named only by aliases still exists; its tenant is unknown (reported as a gap).
        alias_only = (
            aliases.select("project")
            .unique()
            .join(projects, on="project", how="anti")
            .with_columns(
                pl.lit(NO_TENANT).alias("tenant"),
                pl.lit(None, dtype=pl.String).alias("display_name"),
                pl.lit(None, dtype=pl.String).alias("cost_center"),
            )
        )
        projects = pl.concat([projects, alias_only.select(projects.columns)])
        return cls(
            aliases=aliases.select("source", "key", "project").unique(["source", "key"], keep="first"),
            projects=projects,
            identity=owners.height == 0 and aliases.height == 0,
        )

    def resolve(self, frame: FrameT, owner: str = "owner", source: str = "source") -> FrameT:
        """Add `project` and `tenant` (null when the key maps nowhere: unattributed).

        Takes a DataFrame or a LazyFrame and returns the same kind.
        """
        if self.identity:
            return frame.with_columns(pl.col(owner).alias("project"), pl.col(owner).alias("tenant"))
        lazy = isinstance(frame, pl.LazyFrame)

        def side(f: pl.DataFrame):
            return f.lazy() if lazy else f

        via_alias = frame.join(
            side(self.aliases.rename({"source": "_src", "key": "_key", "project": "_alias_project"})),
            left_on=[source, owner],
            right_on=["_src", "_key"],
            how="left",
        )
        direct = side(self.projects.select(pl.col("project").alias("_direct_project")))
        out = via_alias.join(direct, left_on=owner, right_on="_direct_project", how="left", coalesce=False)
        out = out.with_columns(pl.coalesce("_alias_project", "_direct_project").alias("project")).drop(
            "_alias_project", "_direct_project"
        )
        return out.join(side(self.projects.select("project", "tenant")), on="project", how="left")

    def tenants_without_owner_row(self) -> list[str]:
        return self.projects.filter(pl.col("tenant") == NO_TENANT)["project"].to_list()
