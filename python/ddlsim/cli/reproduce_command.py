"""`ddlsim reproduce PAPER`: regenerate a paper's tables and figures beside the paper's own numbers.

Each paper's command lives in its own module and registers itself on `reproduce_app`.
"""

from __future__ import annotations

import typer

reproduce_app = typer.Typer(
    help="Regenerate a paper's tables and figures with ddlsim, each cell beside the paper's value.",
    no_args_is_help=True,
    rich_markup_mode=None,
)

from .reproduce_training import register as _register_training; _register_training(reproduce_app)  # noqa: E402,E702  thesis, mg-wfbp
from .reproduce_network_operator import register as _register_netop; _register_netop(reproduce_app)  # noqa: E402,E702  network-operator
