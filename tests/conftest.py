import os
import sys

# Tests import their helpers as `tests.helpers`; make the repo root importable under xdist too.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
