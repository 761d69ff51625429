"""`python -m agent_runtime.cli`: the `agent-runtime` command."""

import sys

from agent_runtime.cli.main import main

sys.exit(main())
