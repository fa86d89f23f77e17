"""parse_claude_stream: Claude Code stream-json, including the garbage a crashed run leaves."""

from __future__ import annotations

import json

from deep_pipeline.traces import parse_claude_stream


def lines(*events) -> str:
    return "".join((e if isinstance(e, str) else json.dumps(e)) + "\n" for e in events)


def assistant(message_id, *blocks):
    return {"type": "assistant", "message": {"id": message_id, "role": "assistant", "content": list(blocks)}}


def tool_result(tool_id, content, is_error=False):
    return {"type": "user", "message": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": tool_id, "content": content, "is_error": is_error}]}}


RESULT = {"type": "result", "subtype": "success", "is_error": False, "result": "All done.", "total_cost_usd": 0.25,
          "usage": {"input_tokens": 10, "cache_creation_input_tokens": 20, "cache_read_input_tokens": 30,
                    "output_tokens": 7}}


def test_blocks_of_one_message_merge_and_tool_results_are_own_steps():
    parsed = parse_claude_stream(lines(
        {"type": "system", "subtype": "init", "tools": ["Bash"]},
        assistant("m1", {"type": "text", "text": "Listing."}),
        assistant("m1", {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}}),
        assistant("m1", {"type": "tool_use", "id": "t2", "name": "Bash", "input": {"command": "pwd"}}),
        tool_result("t1", "a.txt"),
        tool_result("t2", [{"type": "text", "text": "/app"}]),
        assistant("m2", {"type": "text", "text": "All done."}),
        RESULT,
    ), origin="test")
    assert [(s.step, s.source, s.text) for s in parsed.steps] == [
        (1, "agent", "Listing."), (2, "tool", "a.txt"), (3, "tool", "/app"), (4, "agent", "All done.")]
    assert [c.call_id for c in parsed.steps[0].tool_calls] == ["t1", "t2"]
    assert parsed.final_output == "All done."
    assert (parsed.prompt_tokens, parsed.completion_tokens, parsed.cost_usd) == (60, 7, 0.25)
    assert not parsed.is_error and parsed.bad_lines == 0


def test_non_json_lines_are_counted_not_fatal():
    parsed = parse_claude_stream(lines(
        "Error: something on stderr", "[1, 2]", assistant("m1", {"type": "text", "text": "Hi."}), '{"type": "ass'
    ), origin="test")
    assert parsed.bad_lines == 3
    assert [s.text for s in parsed.steps] == ["Hi."]
    assert parsed.final_output == "Hi."  # no result line: the last agent text
    assert parsed.prompt_tokens is None and parsed.cost_usd is None


def test_error_result_and_plain_user_text():
    parsed = parse_claude_stream(lines(
        {"type": "user", "message": {"role": "user", "content": "Make the report."}},
        assistant("m1", {"type": "text", "text": "Trying."}),
        {"type": "result", "subtype": "error_max_turns", "is_error": False, "usage": {}},
    ), origin="test")
    assert [s.source for s in parsed.steps] == ["user", "agent"]
    assert parsed.is_error


def test_garbage_only_stream_gives_no_steps():
    parsed = parse_claude_stream("segfault\n\n\x00\x01\n", origin="test")
    assert parsed.steps == [] and parsed.bad_lines == 2 and parsed.final_output == ""


def test_line_separator_characters_inside_strings_do_not_split_records():
    # Node's JSON.stringify leaves U+2028 raw; only \n ends a JSON-lines record.
    text = '{"type": "assistant", "message": {"id": "m1", "content": [{"type": "text", "text": "a\u2028b\x85c"}]}}\n'
    parsed = parse_claude_stream(text, origin="test")
    assert parsed.bad_lines == 0 and parsed.steps[0].text == "a\u2028b\x85c"
