"""Parquet output follows docs/results-schema.md and is partitioned by run_id."""

import os
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench import results as res
from bench.schema import SCHEMAS
from bench.runner import run

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "results-schema.md")
TYPES = {"string": pa.string(), "int32": pa.int32(), "int64": pa.int64(), "float64": pa.float64(),
         "bool": pa.bool_()}


def documented_columns() -> dict:
    """{dataset: {column: type}} parsed from the tables of docs/results-schema.md."""
    out, current = {}, None
    for line in open(DOC):
        m = re.match(r"^##+ .*`(\w+)`", line)
        if m and m.group(1) in SCHEMAS:
            current = m.group(1)
            out.setdefault(current, {})
        elif line.startswith("### Added columns of `summary`"):
            current = "summary"
        elif line.startswith("## "):
            current = None
        elif current and line.startswith("|") and not line.startswith(("| column", "|---")):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            names = [n.strip() for n in cells[0].split(",")]
            types = [t.strip() for t in cells[1].split(",")]
            for i, n in enumerate(names):
                out[current][n] = TYPES[types[i] if len(types) > 1 else types[0]]
    return out


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("results"))
    r = run(dict(store="noop", duration=1.2, warmup=0.2, run_id="rtest-1"))
    res.write_result(d, r)
    return d, r


def test_doc_and_writer_agree_on_every_column():
    doc = documented_columns()
    assert set(doc) == {"timeseries", "checkpoints", "summary"}
    for name, schema in SCHEMAS.items():
        assert {f.name: f.type for f in schema} == doc[name], name


@pytest.mark.parametrize("dataset", ["timeseries", "checkpoints", "summary"])
def test_files_have_the_documented_types_and_run_id_partition(written, dataset):
    d, r = written
    part = os.path.join(d, dataset, "run_id=rtest-1")
    files = [f for f in os.listdir(part) if f.endswith(".parquet")]
    assert files, f"no file under {part}"
    file_schema = pq.read_schema(os.path.join(part, files[0]))
    assert "run_id" not in file_schema.names  # it is the partition key
    want = {n: t for n, t in documented_columns()[dataset].items() if n != "run_id"}
    assert {f.name: f.type for f in file_schema} == want
    table = res.read_dataset(d, dataset)
    assert table.schema.field("run_id").type == pa.string()
    expect = {"timeseries": len(r["timeseries"]), "checkpoints": 0, "summary": 1}[dataset]
    assert table.num_rows == expect
    if expect:
        assert set(table.column("run_id").to_pylist()) == {"rtest-1"}


def test_summary_values_are_sane(written):
    _d, r = written
    s = r["summary"]
    assert s["store"] == "noop" and s["ops"] > 1000 and s["throughput"] > 1000
    assert len(r["timeseries"]) == 2  # 1.2 s: one full second and a partial one
    assert sum(t["ops"] for t in r["timeseries"]) == s["ops"]
    assert 0 < s["lat_p50_us"] <= s["lat_p99_us"]


def test_run_ids_start_with_a_letter():
    assert re.match(r"^[a-z]\d{8}T\d{6}-[0-9a-f]{6}$", res.new_run_id())
