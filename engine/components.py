"""What a module's compiled functions are part of, as a user would name it: (log prefix, component),
for the lines engine/compile_notice.py prints while numba compiles.

The core names its own; each package above it names its modules when it is imported
(feeds/__init__.py, replay/__init__.py), before any of its functions can compile, so the core
knows nothing of them. (No numba here: a package imports this at its own import.)
"""
NAMES = {"engine": ("engine", "the engine's rings, clock and latency code")}


def name_components(table):
    """{module or package name: (log prefix, what)}: what the functions of that module (or of every
    module of that package that has no entry of its own) are part of."""
    NAMES.update(table)


def component_of(module):
    """(prefix, what) for a module name: its own entry, else its package's (the longest that has
    one), else None."""
    name = module
    while name:
        if name in NAMES:
            return NAMES[name]
        name = name.rpartition(".")[0]
    return None
