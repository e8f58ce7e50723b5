"""Who said a memory: the speaker read from what a client sends.

The rule (README "API", "What a memory's content and time mean to ranking"):

1. ``metadata.speaker``, when the client sends it as a non-empty string, is the speaker (a
   leading ``"<that name>:"`` of the content is then taken off the indexed body).
2. Else a leading ``"Name: "`` of the content names the speaker when all of these hold:

   - the name is one to three words separated by single spaces, each word starting with an
     upper-case (or title-case) letter and made of letters, combining marks, apostrophes,
     dots and hyphens, at most 24 characters a word (``Caroline``, ``Mary-Ann``,
     ``Dr. Smith``, ``O'Neil``, ``Émile``);
   - ``":"`` (or the full-width ``"："``) follows the name directly, then at least one space
     and some text;
   - no word of the name is a label word of ``LABEL_WORDS`` (compared case-folded): headers
     and labels such as ``"Note: ..."``, ``"Re: ..."``, ``"Fwd: ..."``, ``"P.S.: ..."``,
     ``"Update: ..."``, ``"Monday: ..."``, ``"Step 2: ..."`` (a digit is no name letter) are
     not speakers.

   Times (``"10:30 ..."``), links (``"https://..."``) and lower-case openings (``"note: ..."``)
   fail the shape. Names in scripts without letter case (Chinese, Japanese, Arabic, ...) are
   not recognised by rule 2: such clients send ``metadata.speaker``.

The pattern runs on RE2 (``memory_core.linear_re``): linear in the content's length, and it
only looks at the content's start.
"""

from __future__ import annotations

from .. import linear_re

_NAME_WORD = r"[\p{Lu}\p{Lt}][\p{L}\p{M}'’.\-]{0,23}"
_LEADING = linear_re.compile(
    r"^[ \t]*(" + _NAME_WORD + r"(?: " + _NAME_WORD + r"){0,2})[:：][ \t]+" + linear_re.NOT_SPACE
)

LABEL_WORDS = frozenset(
    """
    note notes nb n.b. n.b ps p.s. p.s pps re fw fwd fwd. subject subj update updates edit edited
    reminder todo to-do fyi tldr tl important warning caution attention alert disclaimer info
    tip tips hint example examples e.g. i.e. question answer q a summary recap conclusion result
    results error errors status step steps source sources ref reference references via cc bcc from
    to date time title topic agenda goal goals plan task tasks problem solution fix bug issue
    news breaking quote definition meaning translation correction update. caveat
    today tomorrow yesterday tonight morning evening afternoon weekend
    monday tuesday wednesday thursday friday saturday sunday
    january february march april may june july august september october november december
    """.split()
)
"""Words that open a label or header rather than a speaker's name (case-folded)."""


def leading_speaker(content: str) -> tuple[str, str] | None:
    """``(speaker, body)`` when ``content`` opens with ``"Name: "`` per the module's rule 2,
    else None. ``speaker`` is the name as written, ``body`` the content after the colon with
    leading whitespace removed."""
    m = _LEADING.search(content)
    if m is None:
        return None
    name = m.group(1)
    if any(w.casefold() in LABEL_WORDS for w in name.split(" ")):
        return None
    return name, content[m.end(1) + 1 :].lstrip()


def speaker_and_body(content: str, metadata: object) -> tuple[str, str | None]:
    """``(body, speaker)`` of a memory (module rules 1 and 2): ``metadata`` is the memory's
    metadata (any value; only a dict's non-empty string ``"speaker"`` counts). Without a
    speaker the body is ``content`` unchanged and the speaker None."""
    given = metadata.get("speaker") if isinstance(metadata, dict) else None
    if isinstance(given, str) and given.strip():
        name = given.strip()
        for sep in (":", "："):
            if content.startswith(name + sep):
                return content[len(name) + 1 :].lstrip(), name
        return content, name
    found = leading_speaker(content)
    if found is None:
        return content, None
    return found[1], found[0]
