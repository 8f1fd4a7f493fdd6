"""core.import_spec: the one resolver of ``pkg.module:attribute`` specs."""

from __future__ import annotations

import pytest

from openfunctions.core import ConfigurationError, import_spec


class Refused(Exception):
    pass


def test_resolves_the_attribute_and_its_default():
    assert import_spec("json:dumps", default_attr="x") is __import__("json").dumps
    assert import_spec("json", default_attr="loads") is __import__("json").loads


@pytest.mark.parametrize(("spec", "says"), [
    (":dumps", "use the form pkg.module:attribute"),
    ("no_such_module_zz:x", "cannot import 'no_such_module_zz'"),
    ("json:no_such_attr", "module 'json' has no attribute 'no_such_attr'"),
])
def test_errors_name_the_option_the_spec_and_what_was_wrong(spec, says):
    with pytest.raises(Refused) as e:
        import_spec(spec, default_attr="registry", what="--module", error=Refused)
    assert str(e.value).startswith(f"--module {spec!r}: ") and says in str(e.value)


def test_missing_ok_gives_none_only_for_a_missing_attribute():
    assert import_spec("json:no_such_attr", default_attr="x", missing_ok=True) is None
    with pytest.raises(ConfigurationError, match="cannot import"):
        import_spec("no_such_module_zz", default_attr="x", missing_ok=True)
