"""Put the repository root on sys.path, so jobs import this checkout's cselab (also in conda envs)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
