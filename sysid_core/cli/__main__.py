"""``python -m sysid_core.cli``: sysid-identify."""
import sys

from . import main

sys.exit(main())
