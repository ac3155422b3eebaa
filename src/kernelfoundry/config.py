"""Configuration: the one documented place for every setting.

Values come from environment variables prefixed `KF_` (e.g. `KF_NATS_URL`), then from CLI flags that
override them. Never read os.environ for a KernelFoundry setting anywhere else.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="KF_", extra="ignore")

    # Transport
    nats_url: str = Field("nats://127.0.0.1:4222", description="NATS server with JetStream")
    state_dir: Path = Field(
        Path(".kf"), description="Embedded state: JetStream data, SQLite lineage, kernels"
    )
    store_uri: str = Field(
        "", description="sqlite:///path.db or mongodb://host/db; empty: SQLite in state_dir"
    )
    grpc_address: str = Field("127.0.0.1:50051", description="Evolver's public gRPC API")
    store_grpc_address: str = Field("127.0.0.1:50052", description="Store's lineage query API")
    metrics_port: int = Field(9464, description="Prometheus /metrics port of this service (0: any free port)")
    # Who may call the public gRPC APIs (kernelfoundry.api.auth); all empty: plaintext, no token (local stack)
    api_token: SecretStr = Field(
        SecretStr(""),
        description="Bearer token every gRPC call must carry (servers: empty = none needed; clients: sent)",
    )
    api_tls_cert: str = Field("", description="Servers: PEM certificate chain; set with the key, TLS only")
    api_tls_key: str = Field("", description="Servers: PEM private key of api_tls_cert")
    api_tls_ca: str = Field("", description="Clients: PEM CA that signed the servers' certificate (TLS)")
    api_tls: bool = Field(False, description="Clients: TLS with the system's roots (no api_tls_ca)")
    api_tls_server_name: str = Field(
        "", description="Clients: the name the server's certificate carries, when the address is not it"
    )
    # This service's NATS user (kernelfoundry.bus.permissions; empty: no user, as the embedded stack)
    nats_user: str = Field("", description="NATS user name of this service, e.g. kf-executor-cuda-h200")
    nats_password: SecretStr = Field(SecretStr(""), description="Password of nats_user (from a Secret)")
    # How JetStream keeps the streams (kernelfoundry.bus.topology; 0: no limit)
    stream_replicas: int = Field(1, ge=1, le=5, description="Replicas of every stream (3 in production)")
    events_max_age_h: float = Field(720.0, ge=0, description="Hours the event history and dead letters keep")
    events_max_bytes: int = Field(
        0, ge=0, description="Bytes each of KF_EVENTS, KF_DEADLETTER keeps (reserved on the NATS servers)"
    )
    artifacts_max_age_h: float = Field(
        48.0, ge=0, description="Hours a built unit stays in the artifact store"
    )
    artifacts_max_bytes: int = Field(0, ge=0, description="Bytes the artifact store keeps (reserved, too)")
    log_level: str = "info"
    log_format: str = Field("json", description="json or console")

    # Hardware this process serves: compiler build target or executor device, e.g. cpu.x86_64, cuda.sm90,
    # cuda.h200. Several may be given comma-separated.
    hardware: str = "cpu.x86_64"
    build_targets: str = Field(
        "", description="Extra execution->build target pairs, e.g. cuda.l40s=cuda.sm89,cuda.mi300=hip.gfx942"
    )
    generator: str = Field(
        "heuristic",
        description="Generator the llm service serves: heuristic, or the name its KF_LLM_PROVIDERS serve as"
        " one ensemble (docs/generators.md)",
    )
    # LLM providers (kernelfoundry.generators.registry; docs/generators.md)
    llm_providers: str = Field(
        "",
        description="JSON list of provider entries (name, kind openai|anthropic|heuristic, model, base_url,"
        " api_key_env, weight, limits) the llm service serves KF_GENERATOR with; empty: the heuristic alone",
    )
    llm_prices: str = Field(
        "", description='Price table: JSON {"model": {"prompt": USD, "completion": USD}} per million tokens'
    )
    llm_fallback: bool = Field(
        True, description="The heuristic proposer answers when every provider is out or failing"
    )
    llm_seeder: str = Field("", description="Provider that writes every seed (no parent); empty: weighted")
    llm_meta_prompter: str = Field(
        "", description="Provider whose model rewrites prompt variants' guidance sections; empty: rules only"
    )
    llm_cooldown_s: float = Field(
        60.0, gt=0, description="How long a provider that failed 3 times in a row is taken out"
    )
    llm_concurrency: int = Field(
        8, ge=1, description="Generation requests one llm service answers at once with providers configured"
    )
    cpu_executors: int = Field(
        1,
        ge=0,
        description="CPU executor processes the embedded stack (`up`, `run`) starts; they time in turn",
    )
    gpu_executors: int = Field(
        0,
        ge=0,
        description="GPU executor processes the embedded stack starts, one per visible GPU (0: every visible"
        " GPU; N: the first N)",
    )
    executor_slots: int = Field(
        1,
        ge=1,
        le=8,
        description="Evaluations a GPU executor runs at once on its device, each in its own judge: their"
        " trials overlap while their timed runs take turns (a per-device timing lock; 1: one at a time)",
    )
    executor_name: str = Field(
        "",
        description="This executor's name in its logs and evaluation records (the embedded stack sets"
        " executor:<hardware>[:<n>], Kubernetes the pod name; empty: the host name)",
    )

    # Delivery
    ack_wait_s: float = Field(30.0, description="Seconds before an unacknowledged message is redelivered")
    max_deliver: int = Field(5, description="Deliveries before a message is dead-lettered")
    heartbeat_s: float = Field(5.0, description="In-progress acks while a long message is handled")
    max_ack_pending: int = Field(64, description="Messages in flight per consumer, across its whole pool")

    resume_wait_s: float = Field(
        60.0, description="How long a starting evolver waits for the store to catch up"
    )

    # The public gRPC API's limits (src/kernelfoundry/api): beyond them a request is refused, naming the limit
    api_max_islands: int = Field(8, description="Most islands one run may ask for")
    api_max_population: int = Field(64, description="Most candidates per generation one run may ask for")
    api_max_iterations: int = Field(1000, description="Most iterations (generations) one run may ask for")
    api_max_candidates_in_flight: int = Field(
        256, description="Most candidates one run may have in flight at once (population x islands)"
    )
    api_max_active_runs: int = Field(64, description="Most runs the evolver keeps running at once")
    api_max_request_bytes: int = Field(
        8 * 1024 * 1024,
        description="Largest request the evolver's API receives (gRPC max_receive_message_length)",
    )
    api_max_archive_bytes: int = Field(
        64 * 1024 * 1024,
        description="Largest run archive ImportRun accepts (and the store API's request size)",
    )
    api_max_decompressed_bytes: int = Field(
        512 * 1024 * 1024, description="Most bytes one run archive may expand to when imported"
    )
    served_hardware: str = Field(
        "",
        description="Execution hardware served by configured pools (comma-separated), accepted at submission"
        " even while no executor of it is connected (pools that scale to zero); the embedded stack sets it",
    )
    served_generators: str = Field(
        "", description="Generators served by configured llm pools (comma-separated), besides KF_GENERATOR"
    )
    run_unserved_grace_s: float = Field(
        120.0, description="A run whose generate/compile/execute subject no consumer serves fails after this"
    )
    run_stall_timeout_s: float = Field(
        3600.0, description="A run that hears nothing of its candidates for this long fails (no_progress)"
    )
    validation_workers: int = Field(
        2, ge=1, description="Submitted tasks the evolver validates at once (each in a sandboxed child)"
    )
    validation_queue: int = Field(
        16,
        ge=0,
        description="Submissions waiting for a validation slot; one more is refused with RESOURCE_EXHAUSTED",
    )

    # Work
    compile_timeout_s: float = 120.0
    compile_concurrency: int = Field(
        0, description="Builds one compiler process runs at once (0: half the cores, at most 8)"
    )
    evaluation_deadline_s: float = 300.0
    screening: bool = Field(
        True,
        description="Screen candidates whose cell has an elite: a short verified measurement first,"
        " the full timing protocol only within the margin of the elite's time"
        " (kernelfoundry.evaluation.screening)",
    )
    correctness_trials: int = 5
    timed_runs: int = 0  # 0: the backend's default
    cpu_threads: int = 0  # 0: all cores
    device_lock_dir: str = Field(
        "",
        description="Folder of the host's GPU leases: a task validation on a GPU waits for the evaluation in"
        " flight there and holds new ones back (evolver and GPU executors on one machine; the embedded stack"
        " sets it; empty: off)",
    )
    timing_lock_dir: str = Field(
        "",
        description="Folder of the host-wide lock that holds builds back while a CPU executor times"
        " (compiler and CPU executor on one machine; the embedded stack sets it; empty: off)",
    )
    torch_compile_baseline: bool | None = Field(
        None,
        description="Time torch.compile beside every candidate, like eager (unset: on for CUDA, off for CPU,"
        " where each evaluation's compile takes seconds)",
    )

    @property
    def resolved_store_uri(self) -> str:
        return self.store_uri or f"sqlite:///{(self.state_dir / 'lineage.db').resolve()}"

    @property
    def build_targets_map(self) -> dict[str, str]:
        pairs = [p.split("=", 1) for p in self.build_targets.split(",") if "=" in p]
        return {k.strip(): v.strip() for k, v in pairs}

    @property
    def resolved_compile_concurrency(self) -> int:
        if self.compile_concurrency > 0:
            return self.compile_concurrency
        return max(1, min(8, (os.cpu_count() or 1) // 2))

    @property
    def hardware_list(self) -> list[str]:
        return [h.strip() for h in self.hardware.split(",") if h.strip()]

    @property
    def served_hardware_list(self) -> list[str]:
        return [h.strip() for h in self.served_hardware.split(",") if h.strip()]

    @property
    def served_generators_list(self) -> list[str]:
        return [g.strip() for g in [self.generator, *self.served_generators.split(",")] if g.strip()]


def load_settings(**overrides: object) -> Settings:
    """Settings from the environment, with explicit overrides (CLI flags) applied on top."""
    clean = {k: v for k, v in overrides.items() if v is not None}
    return Settings(**clean)  # type: ignore[arg-type]
