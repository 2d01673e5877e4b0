"""Conda environments: every rule that runs a script names an env file that exists, parses and
pins exactly what constraints.txt pins (what the tests ran with)."""

import re
from pathlib import Path

import pytest

from tests.helpers import read_yaml

ROOT = Path(__file__).resolve().parents[1]
#: a rule, or a rule generated in a loop (``rule:`` + ``name:``; keyed by its name expression)
RULE = re.compile(r"^ *rule ?(\w*):\n(.*?)(?=^ *rule[ :]|\Z)", re.S | re.M)


def constraints() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")
            pins[name.lower().replace("_", "-")] = version
    return pins


def rules() -> dict[str, str]:
    return {m[1] or re.search(r"name:\s*\n\s*(.+)", m[2])[1].strip(): m[2]
            for f in sorted((ROOT / "rules").glob("*.smk")) for m in RULE.finditer(f.read_text())}


def test_every_script_rule_names_an_existing_env():
    found = rules()
    assert {"train", "segment_corpus", "figure", "table", "_kind.rule"} <= set(found)  # evaluate_<kind>: generated
    for name, body in found.items():
        if "script:" not in body:
            continue
        env = re.search(r"conda:\s*\n\s*\"([^\"]+)\"", body)
        assert env, f"rule {name} runs a script but names no conda env"
        path = (ROOT / "rules" / env[1]).resolve()
        assert path.is_file(), f"rule {name}: conda env {env[1]} does not exist"
        spec = read_yaml(path)
        assert "dependencies" in spec and any(str(d).startswith("python=") for d in spec["dependencies"])


@pytest.mark.parametrize("env", sorted(p.name for p in (ROOT / "envs").glob("*.yaml")))
def test_env_pins_match_constraints(env):
    spec = read_yaml(ROOT / "envs" / env)
    pip = next(d["pip"] for d in spec["dependencies"] if isinstance(d, dict) and "pip" in d)
    pins = constraints()
    assert pip, env
    for req in pip:
        name, _, version = req.partition("==")
        key = name.lower().replace("_", "-")
        assert version, f"{env}: {req} is not pinned"
        assert pins.get(key) == version, f"{env}: {req} but constraints.txt pins {key}=={pins.get(key)}"
    assert "torch" not in [r.split("==")[0] for r in pip] or "torch==2.13.0" in pip
