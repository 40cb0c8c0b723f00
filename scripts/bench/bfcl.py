#!/usr/bin/env python3
"""Tool-call accuracy on the Berkeley Function Calling Leaderboard's data, scored by our own AST
match, against one or two OpenAI-compatible servers given by base URL.

The data comes from the `bfcl-eval` wheel (question files and `possible_answer` files; the wheel's
`simple` category is named `simple_python` since BFCL v4, and that is the one used). Each question
goes out as one chat completion with `tools`, temperature 0, the same request to every server; the
two servers are asked in turn, question by question, so a machine whose speed drifts affects both
alike. Nothing of BFCL's own checker is imported: the match below is ours, and it follows BFCL's
published conventions where they matter (an empty string among the allowed values means the
argument may be left out; an integer is accepted where a float is asked; parallel calls match in
any order).

The replies are read as raw JSON (not through an SDK, which would smooth over a malformed reply),
and every `tool_calls` entry is checked for the OpenAI shape on its own: an `id`, `type`
"function", a `function` with a `name` and `arguments` that is a string holding a JSON object.
A reply with a malformed entry counts as malformed and as wrong.

usage: bfcl.py --data DIR [--anchor URL] --candidate URL [--limit N] [--out DIR] [--api-key KEY]
       bfcl.py --data DIR --self-check   (the scorer against the answers themselves, no server)
  DIR: the wheel's bfcl_eval/data folder (scripts/bench/bfcl.sh unpacks it).
  URL: a base URL ending in /v1.
"""

import argparse
import json
import math
import os
import string
import sys
import time
import urllib.error
import urllib.request

# The wheel's file names for the four categories the issue names.
CATEGORIES = {
    "simple": "BFCL_v4_simple_python.json",
    "multiple": "BFCL_v4_multiple.json",
    "parallel": "BFCL_v4_parallel.json",
    "irrelevance": "BFCL_v4_irrelevance.json",
}

# BFCL writes its function docs in a dialect of JSON Schema with Python's type names. OpenAI's
# `tools` take JSON Schema, so each type is mapped: "dict" is an object, "float" a number, "tuple"
# an array (a fixed-length list in Python, which JSON has no type for), and "any" is no type
# constraint at all (the keyword is dropped). The JSON Schema names pass through unchanged.
TYPE_MAP = {
    "dict": "object",
    "float": "number",
    "tuple": "array",
    "integer": "integer",
    "number": "number",
    "string": "string",
    "boolean": "boolean",
    "array": "array",
    "object": "object",
    "null": "null",
}

# A deadline and a size cap on every reply: a hung or runaway server fails its request, not the run.
REQUEST_TIMEOUT_S = 600
MAX_REPLY_BYTES = 4 << 20
MAX_TOKENS = 512


def to_json_schema(schema):
    """BFCL's parameter schema as JSON Schema (see TYPE_MAP)."""
    if isinstance(schema, list):
        return [to_json_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key == "type" and isinstance(value, str):
            if value == "any":
                continue
            out["type"] = TYPE_MAP.get(value, value)
        elif key == "properties" and isinstance(value, dict):
            out["properties"] = {name: to_json_schema(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties"):
            out[key] = to_json_schema(value)
        else:
            out[key] = value
    return out


def tool_name(name):
    """OpenAI function names allow letters, digits, '_' and '-': BFCL's dotted names
    (`math.factorial`) are sent with '_' for '.' and mapped back when scoring."""
    return name.replace(".", "_")


def to_tools(functions):
    tools, names = [], {}
    for fn in functions:
        sent = tool_name(fn["name"])
        names[sent] = fn
        tools.append(
            {
                "type": "function",
                "function": {
                    "name": sent,
                    "description": fn.get("description", ""),
                    "parameters": to_json_schema(fn.get("parameters", {"type": "dict", "properties": {}})),
                },
            }
        )
    return tools, names


# ----- the wire: one chat completion -----


def post_json(url, body, api_key):
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = "Bearer " + api_key
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as response:
            raw = response.read(MAX_REPLY_BYTES + 1)
            status = response.status
    except urllib.error.HTTPError as e:
        raw, status = e.read(MAX_REPLY_BYTES + 1), e.code
    except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
        return None, f"no reply: {e}"
    if len(raw) > MAX_REPLY_BYTES:
        return None, "reply over the size cap"
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError:
        return None, f"HTTP {status}: not JSON: {raw[:200]!r}"
    if status != 200:
        return None, f"HTTP {status}: {json.dumps(parsed)[:300]}"
    return parsed, None


def get_model(base, api_key):
    headers = {"Authorization": "Bearer " + api_key} if api_key else {}
    request = urllib.request.Request(base + "/models", headers=headers)
    with urllib.request.urlopen(request, timeout=60) as response:
        models = json.loads(response.read(MAX_REPLY_BYTES))
    return models["data"][0]["id"]


def malformed_reason(call):
    """Why one `tool_calls` entry is not in OpenAI's shape, or None when it is."""
    if not isinstance(call, dict):
        return "not an object"
    if not isinstance(call.get("id"), str) or not call["id"]:
        return "no id"
    if call.get("type") != "function":
        return "type is not function"
    fn = call.get("function")
    if not isinstance(fn, dict):
        return "no function"
    if not isinstance(fn.get("name"), str) or not fn["name"]:
        return "no function name"
    if not isinstance(fn.get("arguments"), str):
        return "arguments not a string"
    try:
        args = json.loads(fn["arguments"])
    except json.JSONDecodeError:
        return "arguments not JSON"
    if not isinstance(args, dict):
        return "arguments not a JSON object"
    return None


# ----- our AST match -----

# Strings compare the way BFCL's answers are written: case, spaces and a few punctuation marks
# ignored, so "New York, NY" matches "new york ny".
_DROP = str.maketrans("", "", string.whitespace + ",./-_*^")


def norm(s):
    return s.lower().translate(_DROP)


def schema_type(schema):
    return schema.get("type") if isinstance(schema, dict) else None


def value_matches(value, answer, schema):
    """Does `value` (the model's) match one allowed `answer` under the BFCL `schema`?

    A dict answer holds an allowed list per key (as the top level does); a list answer is matched
    element by element; numbers by value, with an int accepted for a float but not the reverse."""
    kind = schema_type(schema)
    if isinstance(answer, dict):
        if not isinstance(value, dict):
            return False
        props = schema.get("properties", {}) if isinstance(schema, dict) else {}
        if any(key not in answer for key in value):
            return False
        return all(
            allowed_contains(value[key], allowed, props.get(key, {}))
            if key in value
            else "" in allowed
            for key, allowed in answer.items()
        )
    if isinstance(answer, list):
        if not isinstance(value, list) or len(value) != len(answer):
            return False
        items = schema.get("items", {}) if isinstance(schema, dict) else {}
        return all(value_matches(v, a, items) for v, a in zip(value, answer))
    if isinstance(answer, bool):
        return isinstance(value, bool) and value == answer
    if isinstance(answer, (int, float)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if kind == "integer" and not isinstance(value, int):
            return False
        return math.isclose(value, answer, rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(answer, str):
        return isinstance(value, str) and norm(value) == norm(answer)
    return value == answer


def allowed_contains(value, allowed, schema):
    return any(value_matches(value, a, schema) for a in allowed)


def call_matches(name, args, expected, functions):
    """One model call against one expected call ({function name: {param: allowed list}})."""
    ((want_name, want_args),) = expected.items()
    fn = functions.get(name)
    if fn is None or fn["name"] != want_name:
        return False
    params = fn.get("parameters", {})
    props = params.get("properties", {})
    if any(req not in args for req in params.get("required", [])):
        return False
    if any(key not in want_args for key in args):
        return False
    for key, allowed in want_args.items():
        if key in args:
            if not allowed_contains(args[key], allowed, props.get(key, {})):
                return False
        elif "" not in allowed:
            return False
    return True


def calls_match(calls, ground_truth, functions):
    """All calls against all expected calls, in any order (a perfect matching, found by search:
    BFCL's parallel questions have at most a handful of calls)."""
    if len(calls) != len(ground_truth):
        return False
    fits = [[call_matches(n, a, g, functions) for g in ground_truth] for n, a in calls]

    def assign(i, used):
        if i == len(calls):
            return True
        return any(fits[i][j] and j not in used and assign(i + 1, used | {j}) for j in range(len(ground_truth)))

    return assign(0, frozenset())


def score(category, reply, answer, functions):
    """(correct, malformed) for one reply."""
    message = reply["choices"][0]["message"] if reply.get("choices") else {}
    raw_calls = message.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        return False, True
    if any(malformed_reason(c) for c in raw_calls):
        return False, True
    calls = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in raw_calls]
    if category == "irrelevance":
        return not calls, False
    return calls_match(calls, answer["ground_truth"], functions), False


# ----- a check of the scorer itself, with no server -----


def first_allowed(allowed):
    """A value an answer allows, built from the first allowed choice at every level; None when the
    argument may be left out."""
    for a in allowed:
        if a == "":
            continue
        if isinstance(a, dict):
            built = {k: first_allowed(v) for k, v in a.items()}
            return {k: v for k, v in built.items() if v is not None}
        if isinstance(a, list):
            return [first_allowed([x]) if isinstance(x, dict) else x for x in a]
        return a
    return None


def self_check(data_dir):
    """Replies built from the possible answers must all score correct (in reversed order for
    parallel), and each one with a changed name, a dropped required argument or an integer where a
    string is wanted must score wrong. Returns the number of replies checked."""
    checked = 0
    for category in ("simple", "multiple", "parallel"):
        questions, answers = load(data_dir, category, 0)
        for question in questions:
            _, functions = to_tools(question["function"])
            truth = answers[question["id"]]["ground_truth"]
            calls = []
            for expected in truth:
                ((name, args),) = expected.items()
                built = {k: first_allowed(v) for k, v in args.items()}
                calls.append((tool_name(name), {k: v for k, v in built.items() if v is not None}))
            assert calls_match(list(reversed(calls)), truth, functions), (question["id"], calls)
            name, args = calls[0]
            assert not calls_match([(name + "_x", args)] + calls[1:], truth, functions), question["id"]
            required = functions[name].get("parameters", {}).get("required", [])
            if required:
                dropped = {k: v for k, v in args.items() if k != required[0]}
                assert not calls_match([(name, dropped)] + calls[1:], truth, functions), question["id"]
            strings = [k for k, v in args.items() if isinstance(v, str)]
            if strings:
                assert not calls_match([(name, {**args, strings[0]: 12345})] + calls[1:], truth, functions)
            checked += 1
    # Irrelevance: no call is right, any call is wrong; a malformed call is malformed.
    fake = {"choices": [{"message": {"tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}}]}
    assert score("irrelevance", fake, None, {}) == (False, False)
    assert score("irrelevance", {"choices": [{"message": {"content": "no"}}]}, None, {}) == (True, False)
    fake["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = "[1]"
    assert score("irrelevance", fake, None, {}) == (False, True)
    return checked


# ----- the run -----


def load(data_dir, category, limit):
    name = CATEGORIES[category]
    with open(os.path.join(data_dir, name)) as f:
        questions = [json.loads(line) for line in f if line.strip()]
    answers = {}
    if category != "irrelevance":
        with open(os.path.join(data_dir, "possible_answer", name)) as f:
            for line in f:
                if line.strip():
                    a = json.loads(line)
                    answers[a["id"]] = a
    # An even spread over the file, the same every run.
    if limit and limit < len(questions):
        questions = [questions[(i * len(questions)) // limit] for i in range(limit)]
    return questions, answers


def ask(base, model, api_key, question):
    tools, functions = to_tools(question["function"])
    body = {
        "model": model,
        "messages": question["question"][0],
        "tools": tools,
        "temperature": 0,
        "max_tokens": MAX_TOKENS,
        # OpenAI's default, said outright so that every server reads the same request.
        "parallel_tool_calls": True,
    }
    started = time.monotonic()
    reply, error = post_json(base + "/chat/completions", body, api_key)
    return reply, error, functions, time.monotonic() - started


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, help="the bfcl-eval wheel's bfcl_eval/data folder")
    parser.add_argument("--anchor", help="base URL of the server to compare against (llama-server)")
    parser.add_argument("--candidate", help="base URL of the server measured (catena serve)")
    parser.add_argument("--limit", type=int, default=20, help="questions per category (0: all)")
    parser.add_argument("--categories", default=",".join(CATEGORIES))
    parser.add_argument("--api-key", default=os.environ.get("BFCL_API_KEY", ""))
    parser.add_argument("--out", help="folder for one JSONL line per question and server")
    parser.add_argument("--self-check", action="store_true", help="check the scorer on the answers themselves")
    args = parser.parse_args()
    if args.self_check:
        print(f"scorer self-check: {self_check(args.data)} answers scored as expected")
        return
    if not args.candidate:
        parser.error("--candidate is required")

    servers = [("candidate", args.candidate)]
    if args.anchor:
        servers.insert(0, ("anchor", args.anchor))
    models = {role: get_model(base, args.api_key) for role, base in servers}
    if args.out:
        os.makedirs(args.out, exist_ok=True)
    totals = {}
    for category in args.categories.split(","):
        questions, answers = load(args.data, category, args.limit)
        log = open(os.path.join(args.out, f"{category}.jsonl"), "w") if args.out else None
        for question in questions:
            for role, base in servers:
                reply, error, functions, seconds = ask(base, models[role], args.api_key, question)
                t = totals.setdefault((category, role), {"n": 0, "correct": 0, "malformed": 0, "errors": 0, "s": 0.0})
                t["n"] += 1
                t["s"] += seconds
                correct = malformed = False
                if error:
                    t["errors"] += 1
                else:
                    correct, malformed = score(category, reply, answers.get(question["id"]), functions)
                t["correct"] += correct
                t["malformed"] += malformed
                if log:
                    message = reply["choices"][0]["message"] if reply and reply.get("choices") else None
                    log.write(
                        json.dumps(
                            {
                                "id": question["id"],
                                "server": role,
                                "correct": correct,
                                "malformed": malformed,
                                "error": error,
                                "seconds": round(seconds, 2),
                                "message": message,
                            }
                        )
                        + "\n"
                    )
                    log.flush()
            print(f"{category} {question['id']} done", file=sys.stderr)
        if log:
            log.close()
    report(totals, [role for role, _ in servers], args.categories.split(","), servers)


def report(totals, roles, categories, servers):
    for role, base in servers:
        print(f"{role}: {base}")
    header = f"| category | server | N | correct | accuracy | malformed | errors | s/question |"
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    for category in categories:
        for role in roles:
            t = totals.get((category, role))
            if not t:
                continue
            print(
                f"| {category} | {role} | {t['n']} | {t['correct']} | {t['correct'] / t['n']:.3f} "
                f"| {t['malformed']} | {t['errors']} | {t['s'] / t['n']:.1f} |"
            )
    if len(roles) == 2:
        print()
        print("| category | accuracy candidate / anchor |")
        print("|---|---|")
        for category in categories:
            a, c = totals.get((category, "anchor")), totals.get((category, "candidate"))
            if a and c:
                ratio = (c["correct"] / a["correct"]) if a["correct"] else float("nan")
                print(f"| {category} | {ratio:.3f} |")


if __name__ == "__main__":
    main()
