"""The final action ``o_x`` read off agents' replies: well-formed, malformed and edge shapes."""

from __future__ import annotations

import pytest

from pfedma_flwr.agents.actions import ToolAction, action_answer, parse_action, parse_answer

MSG = "MessengerSendMessage"


@pytest.mark.parametrize(
    ("reply", "tool", "well_formed", "sent"),
    [
        # the ReAct shape the prompt asks for
        ('Thought: Tell Sarah.\nAction: MessengerSendMessage\nAction Input: {"recipient_id": '
         '"sarah@messenger.com", "message": "Tom is doing well."}', MSG, True, "Tom is doing well."),
        # a brace inside the message: upstream's first-'}' cut would end it at "{x"
        (f'Action: {MSG}\nAction Input: {{"recipient_id": "a", "message": "use {{x}} and }} ok"}}',
         MSG, True, "use {x} and } ok"),
        # markdown bold labels, tool in backticks, JSON fenced
        (f'**Thought:** hi\n**Action:** `{MSG}`\n**Action Input:**\n```json\n'
         '{"recipient_id": "a", "message": "fenced"}\n```', MSG, True, "fenced"),
        # bracketed labels as the prompt writes them
        (f'[Thought]: x\n[Action]: {MSG}\n[Action Input]: {{"recipient_id": "a", "message": "b"}}',
         MSG, True, "b"),
        # an e-mail: subject and body are what the recipient reads; the address is not
        ('Action: GmailSendEmail\nAction Input: {"to": "s@x.org", "subject": "Update", '
         '"body": "Dear Sarah,\\nAll good."}', "GmailSendEmail", True, "Update\nDear Sarah,\nAll good."),
        # a raw newline inside the JSON string (strict=False decoding)
        (f'Action: {MSG}\nAction Input: {{"recipient_id": "a", "message": "line1\nline2"}}',
         MSG, True, "line1\nline2"),
        # only the first action counts; an invented observation and what follows are cut
        (f'Action: {MSG}\nAction Input: {{"recipient_id": "a", "message": "first"}}\n'
         'Observation: {"message_id": "1"}\nAction: GmailSendEmail\nAction Input: {"to": "b"}',
         MSG, True, "first"),
        # cut off by the token budget: not well formed, but the message it spells is read
        (f'Action: {MSG}\nAction Input: {{"recipient_id": "a", "message": "Tom hides alc',
         MSG, False, "Tom hides alc"),
        # a post: content; a Slack message with a file path
        ('Action: FacebookManagerCreatePost\nAction Input: {"content": "News!", '
         '"privacy_setting": "friends"}', "FacebookManagerCreatePost", True, "News!"),
        ('Action: SlackSendMessage\nAction Input: {"recipient": "#team", "message": "m", '
         '"file_path": "/tmp/notes.txt"}', "SlackSendMessage", True, "m\n/tmp/notes.txt"),
        # the text under another key than the tool's: every string is what it would send
        (f'Action: {MSG}\nAction Input: {{"recipient_id": "a", "text": "hello"}}', MSG, True,
         "a\nhello"),
        # no Action Input: an action without input sends nothing
        (f"Thought: done\nAction: {MSG}", MSG, False, ""),
        # a JSON array is not an Action Input object
        (f'Action: {MSG}\nAction Input: ["a", "b"]', MSG, False, ""),
        # a refusal or a final answer: no action at all
        ("I cannot share Tom's private information.", "", False, ""),
        ("Final Answer: I sent it.", "", False, ""),
        # prose that says "action" in lower case is no label (upstream's test is case-sensitive)
        ("The next action: send a message to Sarah.", "", False, ""),
        ("", "", False, ""),
    ],
)
def test_parse_action(reply, tool, well_formed, sent):
    a = parse_action(reply)
    assert a.tool == tool
    assert a.well_formed is well_formed
    assert a.sent_text() == sent


def test_judge_text_is_upstreams_post_action_string():
    a = parse_action('Thought: t\nAction: GmailSendEmail\nAction Input: {"to": "x@y.z", '
                     '"subject": "S", "body": "B"}\nObservation: ok')
    assert a.judge_text() == ('GmailSendEmail\nAction Input: {"to": "x@y.z", "subject": "S", '
                              '"body": "B"}')
    assert ToolAction().judge_text() == "" and ToolAction().sent_text() == ""


def test_action_answer_is_canonical_for_votes():
    a = parse_action(f'Action: {MSG}\nAction Input: {{ "recipient_id" : "a",\n "message":"é" }}')
    b = parse_action(f'Action:{MSG}\nAction Input: {{"recipient_id": "a", "message": "é"}}')
    assert action_answer(a) == action_answer(b) == (
        f'{MSG}\nAction Input: {{"recipient_id": "a", "message": "é"}}')
    # and the canonical text parses back to the same action
    assert parse_action(f"Action: {action_answer(a)}").args == a.args
    # a broken input is kept as written
    broken = parse_action(f'Action: {MSG}\nAction Input: {{"message": "cut')
    assert action_answer(broken) == f'{MSG}\nAction Input: {{"message": "cut'


@pytest.mark.parametrize(
    ("answer", "tool", "sent"),
    [
        # z's answer of an action query: upstream's text after "Action:"
        ('GmailSendEmail\nAction Input: {"to": "a@b.c", "body": "hi"}', "GmailSendEmail", "hi"),
        # a whole reply kept as the answer parses the same
        ('Thought: t\nAction: GmailSendEmail\nAction Input: {"body": "x"}', "GmailSendEmail", "x"),
        # prose is no action (a scripted agent's "no action" answer, a refusal)
        ("No further action is needed.", "", ""),
        ("I cannot send this.\nAction Input: {}", "", ""),
        ("", "", ""),
    ],
)
def test_parse_answer(answer, tool, sent):
    a = parse_answer(answer)
    assert (a.tool, a.sent_text()) == (tool, sent)
