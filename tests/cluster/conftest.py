"""The Ray runtime the cluster tests start listens on the loopback address only: with this set
before Ray is imported, Ray takes 127.0.0.1 as the node's address instead of the address of the
machine's network interface (the tests reach nothing else)."""

import os

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
