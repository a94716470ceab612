"""The published JSON Schemas are current, match the code's records, and real run outputs validate."""

from __future__ import annotations

import json
from dataclasses import fields

import pytest

from advisor.analyze.findings import Finding
from advisor.engine.evaluate import Diagnosis, Outcome
from advisor.report import schemas
from conftest import REPO, fixture_path, run_cli

jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is in the `test` extra")


@pytest.mark.parametrize("name", sorted(schemas.SCHEMAS))
def test_committed_schema_is_generated_from_the_models(name: str) -> None:
    committed = (REPO / "docs" / "schema" / name).read_text()
    assert committed == schemas.schema_text(name), "regenerate: python -m advisor.report.schemas docs/schema"
    jsonschema.Draft202012Validator.check_schema(json.loads(committed))


def test_models_have_the_fields_the_code_writes() -> None:
    assert set(schemas.Diagnosis.model_fields) == {f.name for f in fields(Diagnosis)}
    assert set(schemas.Outcome.model_fields) == {f.name for f in fields(Outcome)}
    assert set(schemas.Fact.model_fields) == {f.name for f in fields(Finding)}


def _validate(run) -> None:  # noqa: ANN001
    for name in ("findings", "diagnoses"):
        schema = json.loads((REPO / "docs" / "schema" / f"{name}.schema.json").read_text())
        jsonschema.Draft202012Validator(schema).validate(json.loads((run / f"{name}.json").read_text()))


@pytest.mark.slow
@pytest.mark.parametrize("example", ["slow_dataloader", "slow_optimizer", "python_loop", "healthy"])
def test_real_example_runs_validate(diagnosed_examples, example: str) -> None:
    _validate(diagnosed_examples[example].path)


@pytest.mark.parametrize("trace", ["v100_resnet_single_rank.pt.trace.json.gz", "mi250_rocm_minitoy.pt.trace.json.gz"])
def test_real_fixture_analyses_validate(trace: str, tmp_path) -> None:
    result = run_cli("analyze", str(fixture_path("kineto", trace)), "--out", str(tmp_path / "run"), "-q", cwd=tmp_path)
    assert result.code == 0, result.output
    _validate(tmp_path / "run")


def test_a_wrong_file_fails_validation() -> None:
    schema = json.loads((REPO / "docs" / "schema" / "diagnoses.schema.json").read_text())
    bad = {"verdict": {"status": "fine", "headline": "", "missing": []}, "diagnoses": [], "outcomes": []}
    with pytest.raises(jsonschema.ValidationError, match="'fine' is not one of"):
        jsonschema.Draft202012Validator(schema).validate(bad)
