"""The run's config: schema.py owns the typed dataclasses and their ConfigStore registration, compose.py composes
conf/ with overrides and converts the result (to_object, model_spec, the override quoting), rules.py owns
ConfigError and validate. The names other modules import are re-exported here."""

from mbexp import CONF_DIR
from mbexp.config.compose import (
    BOOL_KEYS,
    GROUPS,
    HYDRA_FUNCTIONS,
    SCHEMA_KEYS,
    SPEC_KEYS,
    compose_config,
    hydra_override,
    model_spec,
    parse_hint,
    parsed,
    to_object,
    unknown_key,
    when,
)
from mbexp.config.rules import ConfigError, validate
from mbexp.config.schema import (
    Config,
    DataConfig,
    FFNConfig,
    HiddenConfig,
    LoggerConfig,
    ModelConfig,
    NormConfig,
    OptimConfig,
    PlacementConfig,
    SlurmConfig,
    TrainConfig,
    register,
)

__all__ = [
    "BOOL_KEYS", "CONF_DIR", "GROUPS", "HYDRA_FUNCTIONS", "SCHEMA_KEYS", "SPEC_KEYS", "Config", "ConfigError",
    "DataConfig", "FFNConfig", "HiddenConfig", "LoggerConfig", "ModelConfig", "NormConfig", "OptimConfig",
    "PlacementConfig", "SlurmConfig", "TrainConfig", "compose_config", "hydra_override", "model_spec", "parse_hint",
    "parsed", "register", "to_object", "unknown_key", "validate", "when",
]
