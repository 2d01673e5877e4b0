"""The package's shape, checked: imports run one way (data -> models -> training / evaluation ->
reporting -> export -> pipeline), functions stay short, and every table and figure kind is declared once
(the schema enumerates the registries)."""

import ast
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "cselab"
#: which rooms of the house a room may import from (besides io and errors, the foundations)
ALLOWED = {
    "settings": {"settings"},  # the typed config: a foundation every room reads
    "data": {"settings", "data"},
    "models": {"settings", "data", "models"},
    "training": {"settings", "data", "models", "training"},
    "evaluation": {"settings", "data", "models", "evaluation"},
    "reporting": {"settings", "data", "models", "evaluation", "reporting"},
    "export": {"settings", "data", "models", "evaluation", "reporting", "export"},
    "pipeline": {"settings", "data", "models", "training", "evaluation", "reporting", "export", "pipeline"},
}
#: the package's modules outside the rooms: foundations that import no room
FOUNDATIONS = {"errors", "io"}


def imports(path: Path) -> set[str]:
    """Every cselab module a file imports, at the top or inside a function."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("cselab"):
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("cselab"))
    return out


@pytest.mark.parametrize("room", sorted(ALLOWED))
def test_imports_run_one_way(room):
    wrong = []
    for path in sorted((PACKAGE / room).rglob("*.py")):
        for module in imports(path):
            parts = module.split(".")
            if len(parts) > 1 and parts[1] in ALLOWED and parts[1] not in ALLOWED[room]:
                wrong.append(f"{path.relative_to(ROOT)} imports {module}")
    assert not wrong, wrong


def test_every_package_is_a_room_and_foundations_import_none():
    rooms = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert rooms == set(ALLOWED), f"rooms not in ALLOWED: {sorted(rooms - set(ALLOWED))}"
    modules = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__"}
    assert modules <= FOUNDATIONS, sorted(modules - FOUNDATIONS)
    for name in modules:
        wrong = [m for m in imports(PACKAGE / f"{name}.py") if len(m.split(".")) > 1 and m.split(".")[1] in ALLOWED]
        assert not wrong, (name, wrong)


def test_no_function_over_80_lines():
    long = [f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for path in sorted(PACKAGE.rglob("*.py")) for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 80]
    assert not long, long


def test_each_kind_is_declared_once_and_the_schema_enumerates_them():
    from cselab.pipeline.config import load_schema
    from cselab.reporting.kinds import figure_kinds, table_kinds

    schema = load_schema()
    entry = {s: schema["properties"][s]["additionalProperties"] for s in ("tables", "figures")}
    assert entry["tables"]["properties"]["kind"]["enum"] == sorted(table_kinds())
    assert entry["figures"]["properties"]["kind"]["enum"] == sorted(figure_kinds())
    on_disk = json.loads((PACKAGE / "schema" / "config.schema.json").read_text())
    figure = on_disk["properties"]["figures"]["additionalProperties"]
    assert set(figure["properties"]) == {"kind", "title", "experiments", "table"}  # the kinds' options live with them
    for kind in figure_kinds().values():  # every option has its default, declared once with the kind
        assert list(kind.defaults()) == list(kind.schema()["properties"]), kind.name


def test_settings_are_read_by_key_with_no_default_of_their_own():
    """config.yaml states each default of its sections once (the schema requires every key there);
    code that reads a training, evaluation, mlflow, data or spans setting with a fallback of its
    own (``t.get("lr", 3e-5)``) would state a second one."""
    from cselab.pipeline.config import load_schema

    props = load_schema()["properties"]
    keys = set(load_schema()["$defs"]["training"]["properties"])
    for section in ("evaluation", "mlflow", "spans"):
        keys |= set(props[section]["properties"])
    for source in props["data"]["properties"].values():
        keys |= set(source["properties"])
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                    and len(node.args) == 2 and isinstance(node.args[0], ast.Constant) and node.args[0].value in keys
                    and not (isinstance(node.args[1], ast.Constant) and node.args[1].value is None)):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} .get({node.args[0].value!r}, ...)")
    assert not found, found


def test_methods_run_the_encoder_through_their_context():
    """A method encodes through ``ctx.encode`` / ``ctx.run`` (keyed dropout, gradient caching:
    cselab/training/chunks.py), never by calling ``ctx.encoder`` itself: a direct call would draw
    torch's own dropout and escape chunk_size's memory bound."""
    direct = [f"{path.name}:{n}" for path in sorted((PACKAGE / "training" / "methods").glob("*.py"))
              for n, line in enumerate(path.read_text().splitlines(), 1) if "ctx.encoder(" in line]
    assert not direct, f"call ctx.encode / ctx.run instead: {direct}"
