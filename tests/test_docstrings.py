"""Every public name of the library has a docstring: each module, and each public
class, function, method and property of pagestore and its layers (a method that
implements a documented method of a base class inherits that docstring).

tests/test_layers.py and tests/pagestore/test_library_docs.py hold the public API
(`pagestore.__all__`) to the same rule; this covers the layers underneath, which
tools, tests and readers of the code use.
"""

import importlib
import inspect
import pathlib
import sys
import types

ROOT = pathlib.Path(__file__).resolve().parent.parent
# folder -> import name (pyproject.toml's package-dir)
PACKAGES = {"pagestore": "pagestore", "wal": "pagestore.wal", "checkpoint": "pagestore.checkpoint",
            "recovery": "pagestore.recovery", "throttling": "pagestore.throttling",
            "diskio": "pagestore.diskio"}


def module_names() -> list:
    out = []
    for folder, package in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "__pycache__" in path.parts or path.name == "__main__.py":
                continue
            rel = path.with_suffix("").relative_to(ROOT / folder).parts
            if rel[-1] == "__init__":
                rel = rel[:-1]
            out.append(".".join((package, *rel)))
    return out


def undocumented(module) -> list:
    """Public names defined in `module` without a docstring."""
    out = [] if (module.__doc__ or "").strip() else [module.__name__]
    for name, obj in vars(module).items():
        if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
            continue
        if inspect.isclass(obj):
            if not (obj.__dict__.get("__doc__") or "").strip():
                out.append(f"{module.__name__}.{name}")
            for attr, member in obj.__dict__.items():
                if attr.startswith("_"):
                    continue
                if isinstance(member, property):
                    documented = inspect.getdoc(member)
                elif inspect.isfunction(getattr(member, "__func__", member)):
                    documented = inspect.getdoc(getattr(obj, attr))
                else:
                    continue
                if not documented:
                    out.append(f"{module.__name__}.{name}.{attr}")
        elif inspect.isfunction(obj) and not inspect.getdoc(obj):
            out.append(f"{module.__name__}.{name}")
    return out


def test_every_public_name_of_the_library_has_a_docstring():
    names = module_names()
    assert "pagestore.wal.gate" in names and "pagestore.diskio.base" in names
    missing = [n for m in names for n in undocumented(importlib.import_module(m))]
    assert missing == [], "\n".join(missing)


def test_the_check_sees_what_lacks_a_docstring(monkeypatch):
    m = types.ModuleType("m", "A module.")
    monkeypatch.setitem(sys.modules, "m", m)   # inspect finds a method's class through it
    exec("class Base:\n"
         "    '''Documented.'''\n"
         "    def run(self):\n"
         "        '''Runs.'''\n"
         "class Impl(Base):\n"
         "    '''Also documented.'''\n"
         "    def run(self):\n"
         "        return 1\n"
         "    def extra(self):\n"
         "        return 2\n"
         "    @property\n"
         "    def size(self):\n"
         "        return 3\n"
         "def helper():\n"
         "    return 4\n"
         "def _private():\n"
         "    return 5\n", m.__dict__)
    for obj in (m.Base, m.Impl, m.helper, m._private):
        obj.__module__ = "m"
    assert undocumented(m) == ["m.Impl.extra", "m.Impl.size", "m.helper"]
