"""JSON Schema front end: subset check and rewrite into what xgrammar enforces exactly."""

from infernix_jax.constrain.schema.check import (JSON_OBJECT_SCHEMA, SchemaCheck, check_json_schema,
                                                 parse_schema_text)
from infernix_jax.constrain.schema.closing import close, require_all
from infernix_jax.constrain.schema.strings import python_pattern
from infernix_jax.constrain.schema.values import json_type

__all__ = ["JSON_OBJECT_SCHEMA", "SchemaCheck", "check_json_schema", "close", "json_type",
           "parse_schema_text", "python_pattern", "require_all"]
