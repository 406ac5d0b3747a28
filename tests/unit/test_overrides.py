"""The hand-written table of the catalogue (catalogue/overrides.py) names only
what the headers declare: an entry left behind by a header change (a function
renamed, a parameter renamed) would otherwise be silently ignored."""

from cudaprobe.catalogue import generated, overrides


def declared() -> dict[str, set[str]]:
    return {entry[0]: {param[0] for param in entry[5]}
            for table in (generated.RUNTIME, generated.DRIVER, generated.NCCL) for entry in table}


def test_every_override_names_a_declared_function_and_parameter():
    functions = declared()
    stale = [(fn, arg) for fn, arg in overrides.ARGS
             if fn not in functions or arg not in functions[fn]]
    stale += [(fn, None) for fn in overrides.CATEGORIES if fn not in functions]
    assert not stale, f"overrides naming nothing the headers declare: {stale}"


def test_older_headers_name_a_function_the_current_headers_declare():
    functions = declared()
    assert all(name in functions for name, _, _ in overrides.OLDER_HEADERS)
