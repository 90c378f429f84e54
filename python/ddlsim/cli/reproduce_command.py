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

# Each paper's commands live in their own module and register themselves here.
from . import reproduce_network_operator, reproduce_thesis_network, reproduce_training  # noqa: E402

reproduce_training.register(reproduce_app)
reproduce_network_operator.register(reproduce_app)
reproduce_thesis_network.register(reproduce_app)
