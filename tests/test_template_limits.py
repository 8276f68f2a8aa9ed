"""A workflow template is bounded in size and time: what would make a huge value is refused
before it runs, and a render that grows or lasts too long is stopped."""

from __future__ import annotations

import pytest

from pilot.workflow.template_limits import MAX_OUTPUT, TemplateTooCostly, render_bounded
from pilot.workflow.templating import make_environment


@pytest.mark.parametrize(
    "source",
    [
        "{{ 'x' * 10**9 }}",
        "{{ [1] * 10**9 }}",
        "{{ 2 ** (10**9) }}",
        "{{ '%*d' % (10**9, 1) }}",
        "{{ 'x' | center(10**9) }}",
        "{{ 'x'.ljust(10**9) }}",
        "{% for i in range(100000) %}{% for j in range(100000) %}{{ j }}{% endfor %}{% endfor %}",
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    ],
)
def test_a_costly_template_is_refused(source: str) -> None:
    for env in (make_environment(), make_environment(commands=True)):
        with pytest.raises(TemplateTooCostly):
            render_bounded(env.from_string(source), {})


def test_ordinary_templates_render_as_before() -> None:
    env = make_environment()
    source = (
        "{{ 'ab' * 3 }} {{ 2 ** 10 }} {{ '%05d' % 42 }} {{ 'x' | center(5) }}|{{ n }}"
        "{% for i in range(3) %}{{ i }}{% endfor %}{{ range(4) | length }}"
    )
    assert render_bounded(env.from_string(source), {"n": 1}) == "ababab 1024 00042   x  |10124"
    assert len(render_bounded(env.from_string("{{ 'y' * n }}"), {"n": MAX_OUTPUT})) == MAX_OUTPUT
