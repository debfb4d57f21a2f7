"""The shape of a run's config (the typed models every config is checked against) and its JSON Schemas.

`config.read_config` reads a file into one of `SHAPES`; `make schemas` writes `json_schema` of each kind to
trainer/schemas, where tests check they are current.
"""

from __future__ import annotations

import json
import typing
from enum import Enum
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    PrivateAttr,
    TypeAdapter,
    model_validator,
)

from .models import EMBEDDED, TINY

Kind = Literal["rl", "warmup"]
# The advantage estimators, by the names of their functions in advantages.py.
Estimator = Literal["corrgrpo", "grpo", "gdpo"]
DEFAULT_ESTIMATOR: Estimator = "corrgrpo"


class Domain(str, Enum):  # not StrEnum: Python 3.10 is supported
    """A config's `domain`: it picks the shape of `dataset` (SHAPES) and how a rollout is made."""

    CODE = "code"
    TOOLCALL = "toolcall"
    AGENTDOJO = "agentdojo"

    def __str__(self) -> str:
        return self.value

    @property
    def episodes(self) -> bool:
        """Rollouts are multi-turn episodes played against the service, not dataset rows scored once: the
        service brings the rows, columns and environments, and a rollout cannot be sent again."""
        return self is Domain.AGENTDOJO


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ClientOptions(Strict):
    """`AsyncRewardClient` options. An unset one keeps the client's default."""

    timeout: PositiveFloat | None = Field(None, description="seconds per request")
    retries: NonNegativeInt | None = Field(
        None, description="retries of a connection error, timeout, 5xx or 429"
    )
    backoff: PositiveFloat | None = None
    max_backoff: PositiveFloat | None = None
    max_concurrency: PositiveInt | None = None
    chunk_size: PositiveInt | None = Field(None, description="items per request")
    chunk_bytes: PositiveInt | None = None
    token_file: str | None = Field(
        None,
        description="a file holding the service's bearer token (default: $CORRGRPO_API_TOKEN; never the "
        "token itself)",
    )


class Service(Strict):
    url: str = Field(description="the service's base URL, e.g. http://127.0.0.1:8102")
    components: list[str] | None = Field(
        None, description="reward columns, in order (default: all it declares)"
    )
    prefix: str = Field(
        "", description="put before each column's name (two services sharing a component name)"
    )
    weights: dict[str, float] = Field(
        {}, description="per-component weights (default: the service's declared ones)"
    )
    client: ClientOptions = ClientOptions()
    _token: str | None = PrivateAttr(None)
    _token_given: bool = PrivateAttr(False)

    def with_token(self, token: str | None) -> Service:
        """This service sending `token` (None: no token) whatever `client` says. A token is never in a
        file."""
        service = self.model_copy()
        service._token, service._token_given = token, True
        return service

    @property
    def token(self) -> str | None:
        return self._token

    @property
    def token_given(self) -> bool:
        return self._token_given


class Source(Strict):
    path: str = Field(
        description="a hub dataset id, a local file or folder, or a file URL, read with "
        "`datasets.load_dataset` "
        "($CORRGRPO_DATA_DIR maps the shipped ones to local copies)"
    )
    split: str = Field("train", description="the hub dataset's split")
    limit: PositiveInt | None = Field(None, description="the first N rows (default: all)")

    @property
    def sources(self) -> dict[str, list[str]]:
        """The datasets this section reads, by key."""
        return {"path": [self.path]}


class CodeRows(Source):
    """LeetCodeDataset records: `query` is the prompt, the problem goes inline."""

    offset: typing.ClassVar[int] = 0

    @staticmethod
    def row(record: dict[str, Any]) -> dict[str, Any]:
        problem = {key: record[key] for key in ("task_id", "prompt", "entry_point", "test")}
        problem["reference"] = record["completion"]
        return {"prompt": [{"role": "user", "content": record["query"]}], "problem": problem}


class ToolcallRows(Source):
    """RLLA-4K rows: chat `prompt`, `reward_model.ground_truth`."""

    offset: NonNegativeInt = Field(0, description="the first row taken")

    @staticmethod
    def row(record: dict[str, Any]) -> dict[str, Any]:
        prompt = [dict(message) for message in record["prompt"]]
        return {"prompt": prompt, "ground_truth": record["reward_model"]["ground_truth"]}


class ToolcallDemonstrations(Source):
    """ToolRL's warm-up set, {instruction, input, output}."""

    exclude_prompts_of: list[str] = Field(
        [], description="datasets (as `path`) whose user turns are left out"
    )
    think_sentences: PositiveInt | None = Field(
        None, description="keep the first N sentences of each <think>"
    )
    seed: int | None = Field(None, description="shuffle seed before `limit` (default: trl.seed)")

    @property
    def sources(self) -> dict[str, list[str]]:
        return {"path": [self.path], "exclude_prompts_of": self.exclude_prompts_of}


class Episodes(Strict):
    """AgentDojo episodes, from the service."""

    suites: list[str] | None = Field(None, description="default: every suite the service serves")
    user_tasks: list[str] | None = Field(None, description="default: all")
    user_tasks_per_suite: PositiveInt | None = Field(None, description="the first N user tasks of each suite")
    injection_tasks: list[str] | Literal["all"] | None = Field(
        None, description="names, all, or none (no attack)"
    )
    attack: str | None = Field(None, description="default: the service's")
    exclude_unearned: bool = Field(True, description="leave out user tasks earning utility without work")

    @property
    def sources(self) -> dict[str, list[str]]:
        return {}  # the service's tasks


class EpisodeDemonstrations(Episodes):
    limit: PositiveInt | None = Field(
        None, description="demonstrations kept after the shuffle (default: all)"
    )
    seed: int | None = Field(None, description="shuffle seed (default: trl.seed)")


class Common(Strict):
    domain: Domain
    model: str = Field(
        EMBEDDED, description=f"{EMBEDDED!r} (embedded), {TINY!r} (tests), a local checkpoint or hub id"
    )
    torch_threads: PositiveInt | None = Field(
        None, description="CPU threads (default: torch's; the tiny policy: 1)"
    )
    trl: dict[str, Any] = Field({}, description="trl.GRPOConfig (RL) or trl.SFTConfig (warm-up) fields")

    @property
    def sections(self) -> dict[str, Any]:
        """The data sections: `dataset`, and `evaluation` when there is one."""
        found = {name: getattr(self, name, None) for name in ("dataset", "evaluation")}
        return {name: section for name, section in found.items() if section is not None}

    @property
    def output_dir(self) -> str:
        """`trl.output_dir`, which `config.parse_config` always sets."""
        return str(self.trl["output_dir"])

    @property
    def threads(self) -> int | None:
        """The CPU threads torch runs: the tiny policy's small matrices are fastest on one (no synchronisation
        stalls on a loaded CPU)."""
        return self.torch_threads or (1 if self.model == TINY else None)


class RL(Common):
    services: dict[str, Service] = Field(min_length=1)
    estimator: Estimator = DEFAULT_ESTIMATOR
    advantage_floor: PositiveFloat | None = Field(None, description="CorrGRPO only: a floor on sqrt(sum rho)")
    warmup: str | None = Field(
        None, description="the warm-up config `run` runs first when its checkpoint is missing"
    )
    run_dir: str | None = Field(None, description="the run's folder (default: trl.output_dir)")

    @model_validator(mode="after")
    def _run_dir_default(self) -> RL:
        if self.run_dir is None and "output_dir" in self.trl:
            self.run_dir = str(self.trl["output_dir"])
        return self

    @property
    def run_path(self) -> Path:
        """The run's folder: `run_dir`, else `trl.output_dir`."""
        return Path(self.run_dir or self.output_dir)


class CodeRL(RL):
    domain: Literal[Domain.CODE]
    dataset: CodeRows
    evaluation: CodeRows | None = Field(None, description="held-out rows `run` scores after RL")


class ToolcallRL(RL):
    domain: Literal[Domain.TOOLCALL]
    dataset: ToolcallRows
    evaluation: ToolcallRows | None = Field(None, description="held-out rows `run` scores after RL")


class AgentDojoRL(RL):
    domain: Literal[Domain.AGENTDOJO]
    dataset: Episodes = Episodes()
    evaluation: Episodes | None = Field(None, description="held-out episodes `run` evaluates after RL")


class Warmup(Common):
    services: dict[str, Service] = {}


class ToolcallWarmup(Warmup):
    domain: Literal[Domain.TOOLCALL]
    dataset: ToolcallDemonstrations


class AgentDojoWarmup(Warmup):
    domain: Literal[Domain.AGENTDOJO]
    dataset: EpisodeDemonstrations = EpisodeDemonstrations()


RLConfig = CodeRL | ToolcallRL | AgentDojoRL
SingleTurnRL = CodeRL | ToolcallRL
WarmupConfig = ToolcallWarmup | AgentDojoWarmup
Config = RLConfig | WarmupConfig
SHAPES: dict[Kind, dict[Domain, type[Common]]] = {
    "rl": {Domain.CODE: CodeRL, Domain.TOOLCALL: ToolcallRL, Domain.AGENTDOJO: AgentDojoRL},
    "warmup": {Domain.TOOLCALL: ToolcallWarmup, Domain.AGENTDOJO: AgentDojoWarmup},
}
SCHEMA_DIR = Path(__file__).resolve().parents[1] / "schemas"  # trainer/schemas, checked in


def json_schema(kind: Kind) -> dict[str, Any]:
    """The JSON Schema of a config kind: a union over `domain`."""
    shapes = tuple(SHAPES[kind].values())
    # typing.Union: `X | Y` needs the types written out, not a runtime tuple
    union = typing.Annotated[typing.Union[shapes], Field(discriminator="domain")]  # noqa: UP007
    title = "RL config (train, run)" if kind == "rl" else "warm-up config (sft)"
    return {"title": f"corrgrpo trainer {title}", **TypeAdapter(union).json_schema()}


def schema_files() -> dict[str, str]:
    """Each schema file's name and exact text."""
    return {
        f"{kind}.schema.json": json.dumps(json_schema(kind), indent=2, sort_keys=True) + "\n"
        for kind in SHAPES
    }


def write_schemas(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in schema_files().items():
        (directory / name).write_text(text)
    return [directory / name for name in schema_files()]
