"""`memcost hugepages`: look at, grow or empty the hugetlb pools."""

from __future__ import annotations

import argparse

from rich.table import Table

from .. import exit_codes, journal
from ..console import console, fail
from ..hugepool import PAGE_SIZES, pool_status, reserve, set_pool
from ..units import format_bytes
from .. import arguments
from .base import Command


def _show(title: str) -> None:
    table = Table(title=title, title_justify="left")
    for heading in ("page size", "total", "free", "reserved", "surplus", "free memory"):
        table.add_column(heading, justify="right")
    for name, page in PAGE_SIZES.items():
        pool = pool_status(page)
        free = pool["free_pages"] - pool["reserved_pages"]
        table.add_row(name, str(pool["total_pages"]), str(pool["free_pages"]), str(pool["reserved_pages"]),
                      str(pool["surplus_pages"]), format_bytes(free * page))
    console.print(table)


class HugepagesCommand(Command):
    """Show the hugetlb pools, reserve pages in one, or release them (root for changes).

    `status` lists every pool; `reserve SIZE --size 2M|1G` grows a pool until
    SIZE of free pages is there (at most memcost's memory budget); `release --size 2M|1G`
    sets a pool to 0 pages (pages in use stay until their owner frees them); `restore`
    puts back a pool that a killed memcost run left grown (any memcost command does
    this on start, and says so). A pool reserved here stays
    until released; `--reserve-hugepages SIZE` on `memcost costs` or `bigarray` reserves for one run
    and restores the previous size itself.
    """

    name = "hugepages"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        actions = parser.add_subparsers(dest="action", metavar="ACTION", parser_class=type(parser))
        actions.required = True
        actions.add_parser("status", help="show every pool")
        reserve_parser = actions.add_parser("reserve", help="grow a pool until SIZE of pages are free")
        reserve_parser.add_argument("amount", type=arguments.size, metavar="SIZE")
        reserve_parser.add_argument("--size", choices=sorted(PAGE_SIZES), default="2M", help="page size (default 2M)")
        release_parser = actions.add_parser("release", help="set a pool to 0 pages")
        release_parser.add_argument("--size", choices=sorted(PAGE_SIZES), default="2M", help="page size (default 2M)")
        actions.add_parser("restore", help="put back pools a killed memcost run left grown")

    def run(self, args: argparse.Namespace) -> int:
        if args.action == "reserve":
            before, after = reserve(args.amount, PAGE_SIZES[args.size])
            console.print(f"hugetlb {args.size} pool: {before['total_pages']} → {after['total_pages']} pages", markup=False)
        elif args.action == "restore":
            # Every memcost command has already restored what it could on start; this says what is left.
            left = journal.left_behind()
            for entry in left:
                fail(f"{entry['description']} is still as a killed memcost run (pid {entry['pid']}) left it: "
                     "run `memcost hugepages restore` as root")
            if left:
                return exit_codes.UNSUPPORTED
            console.print("Nothing left changed by a killed memcost run.", markup=False)
        elif args.action == "release":
            after = set_pool(PAGE_SIZES[args.size], 0)
            console.print(f"hugetlb {args.size} pool: now {after['total_pages']} pages "
                          f"({after['total_pages']} still in use)" if after["total_pages"] else
                          f"hugetlb {args.size} pool: released", markup=False)
        _show("hugetlb pools")
        return exit_codes.OK
