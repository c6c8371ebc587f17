"""``dra-operators``: the suite's command line."""

from __future__ import annotations

import click

from .lab.cli import lab


@click.group()
@click.version_option(package_name="dra-operators")
def main() -> None:
    """Kubernetes Dynamic Resource Allocation operators, and the lab to run them on."""


main.add_command(lab)

if __name__ == "__main__":
    main()
