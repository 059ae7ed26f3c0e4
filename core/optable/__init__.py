"""The op table: ``registry`` (every op's ``OpDef``: shape rule, forward, backward, its C form)
and ``rows`` (a row op's one row loop, ``RowForm``).

It lives outside ``core.ops`` so that ``core.tape``, which looks ops up in it, never runs
``core/ops/__init__`` (the op wrappers, which need ``core.tape``'s ``Var``): the two import one
way only. ``core.ops``' modules register the ops into ``registry.REGISTRY`` when imported.
This ``__init__`` imports nothing.
"""
