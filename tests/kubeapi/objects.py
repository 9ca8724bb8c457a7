"""Pure helpers on raw object dicts: timestamps, patches, secrets' stringData, owners.

Patches: ``application/merge-patch+json`` is RFC 7386; ``application/strategic-merge-patch+json``
is applied as a merge patch too (lists are replaced, not merged by key — the one place this
server is simpler than a real one); ``application/json-patch+json`` is RFC 6902 via jsonpatch.
"""
from __future__ import annotations

import base64
import copy
import json
from datetime import datetime, timezone
from typing import Any

import jsonpatch
import jsonpointer

from tests.kubeapi.errors import bad_request, unsupported_media_type

Obj = dict[str, Any]

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"


class PatchFailed(Exception):
    """A well-formed patch that does not apply (a failed ``test``, a missing path)."""


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def timestamp(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (``null`` deletes, objects merge, everything else replaces)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def desired_state(obj: Obj) -> Obj:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


def owner_uids(obj: Obj) -> list[str]:
    refs = obj.get("metadata", {}).get("ownerReferences") or []
    return [ref["uid"] for ref in refs if isinstance(ref, dict) and ref.get("uid")]


def fold_string_data(obj: Obj) -> None:
    """Secrets: ``stringData`` is write-only; the server stores it base64'd under ``data``."""
    string_data = obj.pop("stringData", None)
    if isinstance(string_data, dict):
        data = obj.setdefault("data", {})
        for key, value in string_data.items():
            data[key] = base64.b64encode(str(value).encode()).decode()


def parse_patch(media: str, raw: bytes) -> Any:
    """The decoded patch body; 415 for a patch type the server does not take, 400 for junk."""
    if media not in (MERGE_PATCH, STRATEGIC_MERGE_PATCH, JSON_PATCH):
        raise unsupported_media_type(media)
    try:
        patch = json.loads(raw or b"null")
    except ValueError as exc:
        raise bad_request(f"error decoding patch: {exc}") from None
    if media == JSON_PATCH and not isinstance(patch, list):
        raise bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    if media != JSON_PATCH and not isinstance(patch, dict):
        raise bad_request("json: cannot unmarshal array into Go value of type "
                          "map[string]interface {}")
    return patch


def apply_patch(media: str, old: Obj, patch: Any) -> Any:
    """A new document: ``old`` is never modified."""
    if media != JSON_PATCH:
        return merge_patch(old, patch)
    try:
        return jsonpatch.apply_patch(old, patch)
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException, TypeError,
            KeyError) as exc:
        raise PatchFailed(str(exc)) from None
