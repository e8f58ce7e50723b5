"""memory_core.redaction: four edge cases found on a hand-written dev set (each failed on
commit 3dee438): an IBAN whose bank stdnum's registry does not know, a hyphenated invoice
code read as a phone number, OpenAI's ``sk-proj-`` keys, and the period after a masked token."""

from __future__ import annotations

from memory_core.config import RedactionSettings
from memory_core.redaction import Redactor, detect

OPENAI_KEY = "sk-proj-" + "Ab3dE5gH7jK9mN1pQ3sT5vW7yZ0bC2eF4hJ6kL8nP0rS2uV4"


def kinds(text: str) -> list[str]:
    return [f.kind for f in detect(text)]


def test_an_iban_is_checked_by_its_mod_97_not_by_a_bank_registry():
    assert kinds("Send the rent to BE68 5390 0754 7034 please.") == ["iban"]
    assert kinds("Send the rent to BE68 5390 0754 7035 please.") == []  # mod 97 fails


def test_a_number_inside_a_hyphenated_code_is_no_phone():
    assert kinds("The invoice INV-2024-000123 is due.") == []
    assert kinds("Call me at +1 415-555-2671 tomorrow.") == ["phone"]


def test_an_openai_project_key_is_a_credential_even_when_not_stated_as_one():
    assert kinds(f"openai key {OPENAI_KEY} for the bot") == ["credentials"]
    masked = Redactor(RedactionSettings(credentials="mask")).redact(f"openai key {OPENAI_KEY} for the bot")
    assert masked.text == "openai key sk-proj-…[redacted] for the bot"


def test_a_masked_token_keeps_the_period_that_ends_its_sentence():
    result = Redactor(RedactionSettings(credentials="mask")).redact("My key is AKIAIOSFODNN7EXAMPLE. I live in Paris.")
    assert result.text == "My key is AKIA…[redacted]. I live in Paris."
