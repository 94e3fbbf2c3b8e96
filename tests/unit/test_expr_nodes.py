"""Expression nodes keep their hash and literal scalars, and pickle without them."""

from __future__ import annotations

import pickle
import subprocess
import sys

import pyarrow as pa

from imp_core.plan.evaluate import evaluate_predicate
from imp_core.plan.expr import BinaryOp, ColumnRef, InList, Literal


def _tree(word: str) -> BinaryOp:
    return BinaryOp("or", BinaryOp("=", ColumnRef("c"), Literal(word, pa.string())),
                    InList(ColumnRef("d"), (Literal(1, pa.int64()), Literal(-0.0, pa.float64()))))


def test_equal_trees_hash_alike_before_and_after_the_hash_is_kept():
    a, b = _tree("x"), _tree("x")
    first = hash(a)
    assert hash(a) == first == hash(b)
    assert a == b and {a: 1}[b] == 1
    assert a != _tree("y")


def test_a_pickled_node_leaves_its_kept_hash_and_scalar_behind():
    tree = _tree("x")
    hash(tree)
    lit = tree.left.right
    assert lit.scalar() == pa.scalar("x")
    state = pickle.dumps(tree)
    # another process hashes strings with another seed: the kept hash must not travel
    code = ("import pickle, sys; t = pickle.loads(sys.stdin.buffer.read()); "
            "print('_hash' in t.__dict__, '_scalar' in t.left.right.__dict__)")
    out = subprocess.run([sys.executable, "-c", code], input=state, capture_output=True,
                         check=True).stdout.decode().split()
    assert out == ["False", "False"]
    again = pickle.loads(state)
    assert again == tree and hash(again) == hash(tree)


def test_literal_scalars_keep_their_type_and_sign():
    assert Literal(-0.0, pa.float64()).scalar().as_py() == 0.0
    assert str(Literal(-0.0, pa.float64()).scalar()) == "-0.0"
    assert Literal(1, pa.int8()).scalar().type == pa.int8()
    table = pa.table({"c": ["x", "y", None], "d": [2, 1, 3]})
    tree = _tree("x")
    for _ in range(2):  # the second evaluation reads the kept scalars
        assert evaluate_predicate(tree, table).tolist() == [True, True, False]
