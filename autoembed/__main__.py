"""`python -m autoembed` runs the CLI."""

import sys

from autoembed.cli import main

sys.exit(main())
