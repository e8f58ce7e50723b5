"""Screening: does a text read as instructions *to the model* rather than something the user
states? Such text is stored ``quarantined`` (never injected, visible to operators, releasable
by them), because injecting it later would hand a past message control of a future prompt.

**What is judged.** The text the model would read: ``model_text.model_text`` (the renderer's
own normalisation: format characters dropped, NFKC, one line, mixed-script words folded to
Latin), and beside it its ``skeleton`` (every ASCII look-alike folded: ``ЅУЅТЕМ:``, ``ᴅᴇᴠ``),
a squashed view of the skeleton (letters only: ``i g n o r e`` and soft-hyphen-joined words)
for the English override phrases, and each line of the text as written (a role marker that
opened a line still reads as one on the folded line).

**Shapes** (``screen`` returns the first that matches, as a reason), in en, zh, es, de, ja,
fr, ru, pt, it, ko, ar, hi, tr and pl:

- **override**: an imperative to ignore / forget / disregard previous or given instructions,
  rules, guidelines ("ignore all previous instructions", "olvida las reglas", "Vergiss alle
  Regeln", "以前の指示をすべて無視", "talimatları yok say"), "new instructions:", "your real
  instructions are", "from now on you must…", "answer every question with…", text that
  addresses the model reading it ("whenever you read this memory"), a demand for the admin
  password, API key or credentials;
- **role_play**: "you are now DAN / an AI without restrictions", "act as … without
  restrictions", "pretend you have no rules", developer / god mode, jailbreak;
- **prompt_extraction**: "reveal / print / repeat your system prompt / hidden instructions";
- **tool_smuggling**: tool-call syntax (``<tool_call>``, ``"function_call"``,
  ``"tool_calls"``, a JSON object with ``"name"`` and ``"arguments"``), "call / use the …
  tool", "execute this command", ``rm -rf``, ``curl … | sh``;
- **template_tokens**: chat-template control tokens (``<|im_start|>``, ``[INST]``, ``</s>``,
  ``<<SYS>>``, ``<start_of_turn>``) and the memory block's own markers;
- **role_fake**: a message forged for another role: a role name (system, developer,
  assistant, admin, operator, "system prompt"... in every language above) followed by a
  colon at the start of the text, of a line or of a sentence; a role tag (``[system]``,
  ``<system>``, ``(system)``, ``### System``, ``** System message **``, ``-- system --``); a
  JSON role object (``{"role": "system", …}``); a note addressed to the model ("Admin note
  to AI:", "Note to the assistant:", "message from OpenAI:").

Ordinary statements and standing preferences ("always answer in French", "call me Sam",
"from now on I'm vegetarian", "my developer told me to ignore the old docs") are none of
these shapes and are kept (``procedural`` memories for the preferences). No model call.

Every pattern is RE2 (``memory_core.linear_re``), so screening time is linear in the text;
the views are linear too. ``benchmarks/screening.py`` measures recall and false positives on
the labelled set in ``tests/screening_set`` (dev and holdout splits).
"""

from __future__ import annotations

import unicodedata

from .. import linear_re
from ..linear_re import END, NOT_WORD, START
from ..model_text import model_lines, model_text, skeleton

_L = r"[\p{L}\p{M}]"
"""One letter (or combining mark) of any script."""
_CLAUSE = (
    r"(?:^|[.!?;:,()\[\]{}<>\"'*#|。！？；：，、\-–—] ?|"
    + START
    + r"(?:please|pls|now|so|and|then|just|also|kindly|first|you (?:must|should|will|have to|need to|are to)) )"
)
"""Where an imperative starts a clause: the text's start, after punctuation, or after
"please", "and", "you must"... (so "I was told to ignore…" is not an imperative)."""


def _gap(chars: int) -> str:
    """Between two words of a phrase: one non-word character, or up to ``chars`` characters
    of the same sentence between two non-word characters (``START``/``END`` each consume
    one, so they cannot both stand between two adjacent words)."""
    return r"(?:" + NOT_WORD + r"|" + NOT_WORD + r"[^.!?\n]{0," + str(chars) + r"}?" + NOT_WORD + r")"


def _alt(*parts: str) -> str:
    return "(?:" + "|".join(parts) + ")"


# ---------------------------------------------------------------------------- override
_OVERRIDE = [
    # en: an imperative to drop earlier instructions
    _CLAUSE
    + r"(?:ignore|disregard|forget|override|bypass|skip|drop|discard|neglect|abandon)"
    + _gap(40)
    + r"(?:instructions?|rules|prompts?|guidelines|directives|polic(?:y|ies)|orders|commands|constraints"
    r"|restrictions|safety|guardrails|programming|above|everything (?:you|that|above|before))" + END,
    START + r"forget (?:everything|all|anything) (?:you (?:were|have been|'ve been) (?:told|given)|above|before)",
    START + r"(?:stop|quit|cease) (?:following|obeying|observing) (?:your|the|all|any|those|these)",
    START + r"(?:do not|don't|dont|never) (?:follow|obey) (?:the|your|any) (?:rules|instructions|guidelines|polic)",
    START + r"(?:new|updated|real|actual|true) (?:system )?(?:instructions|rules|directives) ?(?:[:：]|are" + END + ")",
    START + r"your (?:real |new |actual |true )?(?:instructions|orders|rules) (?:are|now)" + END,
    START
    + r"(?:the )?(?:previous|prior|above|earlier) (?:instructions|rules|prompt) (?:were|was|are) (?:a test|fake|void|wrong)",
    START + r"(?:rules|instructions|guidelines)(?: above)? (?:no longer|don't|do not) apply",
    START + r"from now on,? you (?:must|will|shall|have to|are (?:going )?to|need to|should)" + END,
    START + r"(?:answer|respond|reply|react)(?: to)? (?:every|all|any|each) (?:questions?|messages?|requests?|prompts?)"
    r"(?: [^.!?\n]{0,20})? (?:with|by (?:saying|giving|sending))" + END,
    START
    + r"(?:whenever|when|every time|each time|if|once) you (?:read|see|load|retrieve|process|recall|find|answer|respond)"
    + _gap(30)
    + r"(?:this|these) (?:memory|memories|message|note|text|instruction)",
    START + r"(?:tell|give|send|show|reveal|share|print|output|leak|include|answer with|respond with|email|post)"
    r"(?: me| us| them| the user)? (?:the |your |any |all |every )?(?:admin(?:istrator)?'?s? |root |system |master |user'?s? )?"
    r"(?:passwords?|api keys?|credentials|secret (?:token|key)s?|private keys?|access tokens?|database credentials)"
    + END,
    START
    + r"(?:comply with|obey|follow) (?:every|all|any) (?:instruction|request|command|order)s?(?: in| from)? (?:this|the user)",
    START
    + r"(?:all |every |any )?(?:content )?(?:filters?|safety (?:checks?|rules?|filters?)) (?:are|is) (?:now )?(?:disabled|off|removed|turned off)",
    START
    + r"(?:disable|turn off|remove|deactivate) (?:your |the |all |any )?(?:safety|content) (?:checks?|filters?|rules?|polic)",
    START + r"(?:you are|you're) (?:now )?allowed to (?:bypass|ignore|break|skip)",
    START
    + r"(?:send|forward|post|upload|leak)(?: all| every)? (?:of )?(?:the )?user'?s? (?:data|memories|history|messages|files)",
    START + r"(?:leak|exfiltrate|dump) (?:the )?(?:conversation|chat) (?:history|logs)",
    r"i have been pwned",
    START + r"(?:insert|add|include|append|embed) (?:a |this |the )?(?:link|url|hyperlink|tracking pixel)" + END,
    # zh
    r"(?:忽略|忽视|无视|忘记|忘掉|不要理会|不要遵守|不用遵守|别管|抛开|违反)[^。！？\n]{0,12}(?:指令|指示|规则|说明|提示|限制|设定|要求|规定)",
    r"从现在(?:起|开始)[，,]?你(?:必须|要|只能|应该|只)",
    r"新的?(?:指令|指示|规则) ?[:：]",
    r"(?:每一?个|所有的?)(?:问题|请求|消息)",
    r"(?:告诉我|给我|发送|透露|说出)[^。！？\n]{0,6}(?:管理员|系统|root)?(?:密码|密钥|凭证)",
    # es
    _CLAUSE
    + r"(?:ignora|ignore|olvida|olvídate de|descarta|omite|haz caso omiso (?:de|a)|no hagas caso (?:de|a)|desobedece)"
    + END
    + r"[^.!?\n]{0,40}?(?:instrucciones|reglas|normas|indicaciones|directrices|órdenes|restricciones|prompt)",
    START + r"a partir de ahora,? (?:debes|tienes que|vas a|solo|sólo|responderás|obedecerás)" + END,
    START + r"nuevas (?:instrucciones|reglas|órdenes) ?[:：]",
    START + r"(?:dime|dame|revela|envía|envia|muestra) (?:la |las |tu |tus )?(?:contraseñas?|claves?|credenciales)",
    START + r"(?:responder|responde|contesta|contestar) a (?:todo|cada pregunta|todas las preguntas) con",
    # de
    _CLAUSE
    + r"(?:ignoriere|ignorier|ignoriert|vergiss|vergesst|vergessen sie|missachte|übergehe|verwirf|umgehe|befolge nicht)"
    + END
    + r"[^.!?\n]{0,40}?(?:anweisung|regel|richtlinie|vorgabe|befehl|instruktion|prompt|einschränkung|beschränkung)",
    START + r"ab (?:jetzt|sofort|nun),? (?:musst|sollst|wirst|darfst) du" + END,
    START + r"neue (?:anweisungen|regeln|befehle) ?[:：]",
    START
    + r"(?:nenne|nenn|gib|sag|verrate|schicke|sende) (?:mir |uns )?(?:das |dein |deine |die )?(?:admin-?|administrator-?|root-?)?(?:passwort|kennwort|zugangsdaten|api-schlüssel)",
    START + r"jede frage mit" + END,
    r"(?:sicherheitsregeln|regeln|richtlinien) (?:gelten|gilt) (?:nicht mehr|ab sofort nicht)",
    # fr
    _CLAUSE
    + r"(?:ignore|ignorez|oublie|oubliez|ne tiens pas compte|ne tenez pas compte|fais abstraction|faites abstraction|outrepasse|contourne|désobéis)"
    + END
    + r"[^.!?\n]{0,40}?(?:instructions|règles|consignes|directives|ordres|restrictions|prompt)",
    START
    + r"(?:à partir de maintenant|désormais|dorénavant|dès maintenant),? (?:tu dois|vous devez|tu vas|tu ne|ignore)",
    START + r"nouvelles (?:instructions|consignes|règles) ?[:：]",
    START
    + r"(?:donne|dis|révèle|envoie|montre)[- ]?(?:moi|nous)? (?:le |les |ton |tes )?(?:mots? de passe|clés? api|identifiants)",
    START + r"à chaque question avec" + END,
    # it
    _CLAUSE
    + r"(?:ignora|ignorate|dimentica|dimenticate|non tenere conto|trascura|scavalca|disobbedisci)"
    + END
    + r"[^.!?\n]{0,40}?(?:istruzioni|regole|indicazioni|direttive|ordini|restrizioni|prompt)",
    START + r"d'ora in (?:poi|avanti),? (?:devi|dovrai|rispondi|ignora)" + END,
    START + r"nuove (?:istruzioni|regole) ?[:：]",
    START + r"(?:dimmi|dammi|rivela|invia|mostra) (?:la |le |tua |tue )?(?:password|credenziali|chiavi)",
    START + r"(?:a ogni|ad ogni|a tutte le) domand[ae] con" + END,
    # pt
    _CLAUSE
    + r"(?:ignore|ignora|esqueça|esqueca|esquece|desconsidere|desconsidera|despreze|despreza|desobedeça)"
    + END
    + r"[^.!?\n]{0,40}?(?:instruções|instrucoes|regras|diretrizes|orientações|ordens|restrições|prompt)",
    START + r"a partir de agora,? (?:você|voce|tu) (?:deve|tem que|vai|precisa|só)" + END,
    START + r"novas (?:instruções|instrucoes|regras) ?[:：]",
    START + r"(?:diga|diz|me diga|revele|envie|mostre) (?:a |as |sua |suas )?(?:senhas?|credenciais|chaves?)",
    START + r"responder a tudo com" + END,
    # ru
    _CLAUSE
    + r"(?:игнорируй|игнорируйте|проигнорируй|забудь|забудьте|не обращай внимания на|не обращайте внимания на|отбрось|пренебреги|не слушай)"
    + END
    + r"[^.!?\n]{0,40}?(?:инструкци|правил|указани|директив|промпт|ограничени|команд)",
    START + r"(?:с этого момента|отныне|теперь),? ты (?:должен|должна|обязан|будешь)" + END,
    START + r"новые (?:инструкции|правила|указания) ?[:：]",
    START + r"(?:скажи|назови|дай|сообщи|отправь)(?: мне)? (?:пароль|ключ|учётные|учетные)",
    START + r"на каждый вопрос" + END,
    # pl
    _CLAUSE
    + r"(?:zignoruj|ignoruj|zapomnij|nie zwracaj uwagi na|pomiń|pomin|zlekceważ|lekceważ|nie słuchaj)"
    + END
    + r"[^.!?\n]{0,40}?(?:instrukcj|zasad|polece|reguł|regul|wytyczn|prompt|ograniczeń)",
    START + r"od (?:teraz|tej chwili),? (?:musisz|masz|będziesz|ignoruj)" + END,
    START + r"nowe (?:instrukcje|zasady|polecenia) ?[:：]",
    START + r"(?:podaj|powiedz|zdradź|wyślij)(?: mi)? (?:hasło|hasla|hasła|klucz|dane logowania)",
    START + r"na każde pytanie" + END,
    # tr (object before verb)
    r"(?:talimat|kural|yönerge|komut|istem|kısıtlama|direktif)"
    + _L
    + r"*[^.!?\n]{0,30}?"
    + START
    + r"(?:yok say|görmezden gel|unut|dikkate alma|umursama|çiğne|boş ver)"
    + END,
    START + r"bundan (?:sonra|böyle)[^.!?\n]{0,60}(?:mal[ıi]s[ıi]n|mel[ıi]s[ıi]n|zorundas[ıi]n)" + END,
    START + r"yeni (?:talimatlar|kurallar|komutlar) ?[:：]",
    START + r"(?:şifre|parola)" + _L + r"* (?:söyle|ver|gönder|yaz)" + END,
    START + r"her soruya" + END,
    # ja
    r"(?:指示|ルール|命令|規則|設定|制限|プロンプト|指令|ガイドライン)[^。！？\n]{0,12}(?:無視|忘れ|従わな)",
    r"(?:すべて|全て)の(?:質問|要求|リクエスト)に[^。！？\n]{0,20}(?:答え|回答|返答)",
    r"新しい(?:指示|ルール|命令) ?[:：]",
    r"(?:パスワード|APIキー|認証情報)を(?:教え|送|見せ|出力)",
    # ko
    r"(?:지시|규칙|지침|명령|설정|제한|프롬프트|안내)" + _L + r"{0,3}[^.!?\n]{0,12}(?:무시|잊)",
    r"모든 (?:질문|요청|메시지)에[^.!?\n]{0,20}(?:대답|답|응답)",
    r"새로운 (?:지시|규칙|명령) ?[:：]",
    r"(?:비밀번호|암호|API 키)(?:를|을)? (?:알려|보여|보내|말해)",
    # ar
    START
    + r"(?:تجاهل|تجاهلي|تجاهلوا|انس|انسى|انسي|أهمل|اهمل|لا تلتزم|لا تتبع|تخط)"
    + END
    + r"[^.!؟\n]{0,30}(?:التعليمات|تعليمات|القواعد|قواعد|الإرشادات|الأوامر|التوجيهات|القيود)",
    START + r"(?:من الآن|من الان)(?: فصاعدا| فصاعدًا)?،? (?:يجب|عليك|ستجيب|أنت مجبر)",
    START + r"تعليمات جديدة ?[:：]",
    START + r"(?:أخبرني|اعطني|أعطني|أرسل) ب?(?:كلمة (?:ال)?مرور|كلمات (?:ال)?مرور|مفتاح)",
    START + r"على كل سؤال" + END,
    # hi
    r"(?:निर्देश|नियम|दिशानिर्देश|आदेश|प्रतिबंध)[^।.!?\n]{0,20}(?:अनदेखा|नज़रअंदाज़|नजरअंदाज|भूल जाओ|भूल जाइए|मत मानो)",
    r"अब से (?:तुम्हें|तुमको|आपको)[^।.!?\n]{0,60}(?:होगा|होगी|चाहिए)",
    r"नए (?:निर्देश|नियम) ?[:：]",
    r"पासवर्ड (?:बताओ|बताइए|दो|भेजो)",
    r"हर (?:सवाल|प्रश्न)",
]

# ---------------------------------------------------------------------------- role play
_NO_LIMITS_EN = (
    r"(?:restrictions|rules|filters|limits|limitations|guidelines|censorship|boundaries|policies|morals|ethics)"
)
_ROLE_PLAY = [
    START
    + r"you are (?:now|no longer|from now on)"
    + _gap(40)
    + r"(?:dan|unrestricted|unfiltered|uncensored|jailbroken|evil|free|bound|restricted|limited|without|an? ai with no)"
    + END,
    START
    + r"(?:act|behave|respond|roleplay|role-play|role play|pose|answer) (?:as|like)"
    + _gap(40)
    + r"(?:without|with no|free of|unfiltered|unrestricted|uncensored|jailbroken|evil|never refuses)"
    + END,
    START + r"pretend (?:that )?(?:you|to) (?:have|are|be|had|were) (?:no|not bound|un|free|without)",
    START + r"(?:developer|god|dan|jailbreak|unrestricted|sudo|debug) mode" + END,
    START
    + r"(?:enable|activate|enter|switch to|turn on) (?:developer|god|admin|debug|maintenance|unrestricted|dan) mode",
    START + r"jailbr(?:oken|eak)",
    START + r"do anything now" + END,
    START + r"you (?:have been|are|were) (?:freed|released|unlocked|liberated) from",
    START + r"you (?:have|got) no (?:content )?" + _NO_LIMITS_EN + END,
    START + r"(?:an? )?(?:ai|assistant|model|chatbot) (?:without|with no) (?:any )?" + _NO_LIMITS_EN + END,
    START + r"(?:in|enter) maintenance mode" + END,
    START + r"obey (?:the user|me) blindly",
    # zh
    r"你现在是(?:一个)?[^。！？\n]{0,8}(?:没有|不受|无)(?:任何)?(?:限制|约束|规则|过滤)",
    r"扮演[^。！？\n]{0,12}(?:没有|不受|无)(?:任何)?(?:限制|约束|规则)",
    r"假装你?(?:没有|不受)(?:任何)?(?:规则|限制|约束)",
    r"开发者模式|越狱模式",
    # es
    START
    + r"(?:ahora|a partir de ahora) eres"
    + END
    + r"[^.!?\n]{0,30}sin (?:restricciones|reglas|filtros|límites|censura)",
    START + r"(?:finge|haz como si|imagina) que no tienes (?:reglas|restricciones|límites|filtros)",
    START + r"(?:actúa|actua|compórtate) como[^.!?\n]{0,30}sin (?:restricciones|reglas|filtros|límites)",
    START + r"modo (?:desarrollador|dios|sin restricciones)" + END,
    # de
    START
    + r"du bist (?:jetzt|nun|ab sofort|ab jetzt)"
    + END
    + r"[^.!?\n]{0,30}(?:ohne (?:jegliche |alle )?(?:einschränkungen|regeln|filter|grenzen|zensur)|uneingeschränkt)",
    START + r"tu so,? als (?:hättest|hast|wärst|wärest) du (?:keine|kein|ohne)",
    START + r"(?:entwicklermodus|entwickler-modus|gott-?modus)",
    # fr
    START
    + r"tu es (?:maintenant|désormais|à présent|dorénavant)"
    + END
    + r"[^.!?\n]{0,30}sans (?:aucune |aucun )?(?:restriction|règle|filtre|limite|censure)",
    START
    + r"(?:fais|faites) (?:comme si|semblant)[^.!?\n]{0,20}(?:aucune|pas de|sans) (?:règle|restriction|limite|filtre)",
    START + r"mode (?:développeur|developpeur|dieu)" + END,
    # it
    START
    + r"(?:ora|adesso|d'ora in poi) sei"
    + END
    + r"[^.!?\n]{0,30}senza (?:restrizioni|regole|filtri|limiti|censura)",
    START + r"fai finta di non avere (?:regole|restrizioni|limiti|filtri)",
    START + r"modalità (?:sviluppatore|dio)" + END,
    # pt
    START
    + r"agora (?:você é|voce é|és|tu és|vc é)"
    + END
    + r"[^.!?\n]{0,30}sem (?:restrições|restricoes|regras|filtros|limites|censura)",
    START + r"finja (?:que )?(?:você |voce )?não (?:tem|ter|possui) (?:regras|restrições|limites|filtros)",
    START + r"modo (?:desenvolvedor|deus)" + END,
    # ru
    START
    + r"(?:теперь|отныне|сейчас) ты"
    + END
    + r"[^.!?\n]{0,30}без (?:каких-либо |всяких |любых )?(?:ограничений|правил|фильтров|цензуры)",
    START + r"(?:притворись|представь),? что у тебя нет (?:правил|ограничений|фильтров)",
    START + r"режим разработчика" + END,
    # pl
    START + r"jesteś teraz" + END + r"[^.!?\n]{0,30}bez (?:żadnych )?(?:ograniczeń|zasad|filtrów|cenzury|reguł)",
    START + r"udawaj,? że nie masz (?:żadnych )?(?:zasad|ograniczeń|reguł|filtrów)",
    START + r"tryb (?:dewelopera|programisty|boga)" + END,
    # tr
    r"(?:kısıtlama|kural|sınır|filtre|sansür)" + _L + r"* olmayan (?:bir )?(?:yapay zeka|yz|ai|asistan|model)",
    r"(?:kural|kısıtlama|sınır)" + _L + r"* (?:yokmuş|olmadığını|yok) gibi davran",
    START + r"geliştirici modu",
    # ja
    r"(?:制限|ルール|規則|フィルター|制約)(?:の|が)(?:ない|無い)(?:AI|人工知能|アシスタント|モデル)",
    r"(?:ルール|制限|規則)が(?:ない|無い)(?:ふり|振り)",
    r"開発者モード|脱獄",
    # ko
    r"(?:제한|규칙|필터|제약)(?:이|은|도)? 없는 (?:AI|인공지능|모델|어시스턴트|챗봇)",
    r"(?:규칙|제한)(?:이|은)? 없는 척",
    r"개발자 모드|탈옥",
    # ar
    r"أنت الآن[^.!؟\n]{0,30}(?:بلا|بدون) (?:أي )?(?:قيود|قواعد|حدود|رقابة)",
    r"تظاهر (?:بأنه|بأنك|أنك|بأن)[^.!؟\n]{0,10}(?:ليس لديك|لا تملك|بلا|بدون)",
    r"وضع المطور",
    # hi
    r"बिना किसी (?:प्रतिबंध|नियम|सीमा|रोक)",
    r"(?:ऐसा दिखाओ|नाटक करो|मान लो) कि (?:तुम्हारे|आपके) (?:कोई )?(?:नियम|प्रतिबंध)",
    r"डेवलपर मोड",
]

# ---------------------------------------------------------------------------- extraction
_PROMPT_EXTRACTION = [
    START
    + r"(?:reveal|print|show|repeat|output|leak|display|dump|recite|write out|tell me|give me|share|what (?:is|are|were))"
    + _gap(30)
    + r"(?:system|hidden|initial|original|secret|exact|full|internal|developer|starting) (?:prompt|instructions|message|rules|guidelines)"
    + END,
    START + r"(?:repeat|print|output|recite) (?:the |all )?(?:text|words|everything|messages?) above",
    START + r"(?:instructions|prompt) you were given by",
    START + r"what (?:is|are) your (?:system )?(?:prompt|instructions)",
    # other languages: the system prompt / hidden instructions with a verb of showing
    r"(?:muestra|revela|repite|imprime|dime|enséñame|ensename)[^.!?\n]{0,20}(?:prompt del sistema|prompt de sistema|instrucciones (?:ocultas|iniciales|del sistema|originales))",
    r"(?:zeige|zeig|gib|verrate|wiederhole|nenne)[^.!?\n]{0,25}(?:systemprompt|system-prompt|systemanweisungen|versteckten anweisungen|ursprünglichen anweisungen|anfangsanweisungen)",
    r"(?:affiche|révèle|revele|montre|répète|repete|donne|dis)[^.!?\n]{0,20}(?:prompt système|prompt systeme|instructions (?:cachées|initiales|système|d'origine)|consignes cachées)",
    r"(?:mostra|rivela|ripeti|stampa|dimmi)[^.!?\n]{0,20}(?:prompt di sistema|istruzioni (?:nascoste|iniziali|di sistema|originali))",
    r"(?:mostre|mostra|revele|revela|repita|imprima|diga)[^.!?\n]{0,20}(?:prompt d[eo] sistema|instruções (?:ocultas|iniciais|do sistema|originais))",
    r"(?:выведи|покажи|раскрой|повтори|напиши|скажи|дай)[^.!?\n]{0,20}(?:системный промпт|системные инструкции|скрытые инструкции|исходные инструкции|системное сообщение)",
    r"(?:wyświetl|pokaż|ujawnij|powtórz|wypisz|podaj)[^.!?\n]{0,20}(?:prompt systemowy|instrukcje systemowe|ukryte instrukcje|początkowe instrukcje)",
    r"(?:sistem istemi|sistem talimat|gizli talimat|ilk talimat|sistem mesaj)"
    + _L
    + r"*[^.!?\n]{0,15}(?:göster|açıkla|yaz|söyle|ver|tekrarla)",
    r"(?:输出|显示|告诉我|透露|复述|打印|重复|给我看|展示)[^。！？\n]{0,10}(?:系统提示|系统指令|初始指令|隐藏的?指令|原始指令|提示词)",
    r"(?:システムプロンプト|隠された指示|初期の指示|元の指示|システム指示)[^。！？\n]{0,10}(?:出力|表示|見せ|教え|繰り返)",
    r"(?:시스템 프롬프트|숨겨진 지시|초기 지시|원래 지시|시스템 지시)[^.!?\n]{0,12}(?:출력|보여|알려|공개|반복)",
    r"(?:اعرض|اكشف|أظهر|اظهر|كرر|اطبع|أخبرني)[^.!؟\n]{0,15}(?:موجه النظام|تعليمات النظام|تعليماتك المخفية|التعليمات المخفية|تعليماتك الأولية)",
    r"(?:सिस्टम प्रॉम्प्ट|छिपे हुए निर्देश|सिस्टम निर्देश|शुरुआती निर्देश)[^।.!?\n]{0,15}(?:दिखाओ|बताओ|लिखो|दोहराओ)",
]

# ---------------------------------------------------------------------------- tools
_TOOL_SMUGGLING = [
    r"</?tool_call>|</?function_call>|</?tool_use>|\"(?:function_call|tool_calls|tool_use)\" ?:",
    r"\{ ?[\"'](?:name|function)[\"'] ?: ?[\"'][^\"']+[\"'] ?, ?[\"'](?:arguments|parameters|args|input)[\"'] ?:",
    START + r"(?:call|use|invoke|run|trigger) the " + r"[\p{L}\p{N}_\-]+" + r" (?:tool|function|plugin|api)" + END,
    START
    + r"(?:execute|run) (?:the following|this|these) (?:shell |bash |python |terminal )?(?:commands?|code|scripts?)",
    START + r"rm -rf" + END,
    r"(?:curl|wget) [^|\n]{0,80}\| ?(?:ba|z)?sh" + END,
]

# ---------------------------------------------------------------------------- template tokens
_TEMPLATE_TOKENS = [
    r"<\| ?(?:im_start|im_end|system|user|assistant|endoftext|start_header_id|end_header_id|eot_id|begin_of_text|tool|ipython) ?\|>",
    r"\[/?INST\]|<</?SYS>>|</s>|<s> ?\[|<start_of_turn>|<end_of_turn>|</?memory_context",
    r"\[(?:/?SYSTEM_PROMPT|TOOL_CALLS|AVAILABLE_TOOLS|TOOL_RESULTS)\]",
]

# ---------------------------------------------------------------------------- role fakes
_ROLE_WORDS = _alt(
    # en
    r"system",
    r"sys",
    r"developer",
    r"dev",
    r"assistant",
    r"ai",
    r"admin",
    r"administrator",
    r"operator",
    r"root",
    r"instructions?",
    r"model",
    r"openai",
    r"anthropic",
    r"chatgpt",
    r"gpt",
    # es, pt, it, fr, de, pl, tr, ru
    r"sistema",
    r"desarrollador",
    r"desenvolvedor",
    r"administrador",
    r"sviluppatore",
    r"amministratore",
    r"système",
    r"développeur",
    r"administrateur",
    r"entwickler",
    r"programista",
    r"deweloper",
    r"sistem",
    r"geliştirici",
    r"yönetici",
    r"система",
    r"разработчик",
    r"администратор",
    r"ассистент",
    # zh, ja, ko, ar, hi
    r"系统",
    r"系統",
    r"开发者",
    r"开发人员",
    r"管理员",
    r"システム",
    r"開発者",
    r"管理者",
    r"시스템",
    r"개발자",
    r"관리자",
    r"النظام",
    r"المطور",
    r"المسؤول",
    r"सिस्टम",
    r"डेवलपर",
    r"एडमिन",
)
_ROLE_QUALIFIER = r"(?: (?:prompt|message|messages|note|override|update|notice|instruction|instructions|directive|mode|command|policy|alert))*"
_ROLE_FAKE = [
    # a role name and a colon at the start of the text (or of a line / a sentence)
    r"(?:^|[.!?;。！？])[ *_#>\-=~`\"'(\[{]*" + _ROLE_WORDS + _ROLE_QUALIFIER + r"[ *_\])}>\-=~`\"']*[:：]",
    # a role name and a dash or colon with a qualifier ("developer message - ...")
    START + _ROLE_WORDS + r" (?:prompt|message|note|override|update|notice) ?(?:[:：]|[-–—] )",
    # a role tag: [system], (system), <system>, {system}, [developer mode]
    r"[\[(<{] ?/? ?" + _ROLE_WORDS + _ROLE_QUALIFIER + r" ?[\])>}]",
    # a markup header or fence: ### System, ** System message **, -- system --
    r"(?:#{1,6}|\*{2,}|-{2,}|={2,}|_{2,}) ?" + _ROLE_WORDS + _ROLE_QUALIFIER + END,
    # a JSON role object
    r"[\"']role[\"'] ?: ?[\"'](?:system|developer|assistant|tool|function)[\"']",
    # a note addressed to the model, a message from its maker
    START
    + r"(?:note|message|memo|reminder|instruction|instructions|notice|warning)s? (?:to|for) (?:the |all |any )?(?:ai|assistant|model|llm|chatbot|bot|gpt|chatgpt|claude|language model|ai model)s?"
    + END,
    START
    + r"(?:message|notice|update|instructions?) from (?:openai|anthropic|the (?:system|developers?|admin|administrator|operator))"
    + END,
    # all-capitals role names with a colon anywhere (SYSTEM:, DEVELOPER:)
    r"(?:^|[^\p{L}\p{N}_])(?:SYSTEM|DEVELOPER|ASSISTANT|ADMIN|ADMINISTRATOR|OPERATOR|SYSTEM PROMPT|SYSTEM OVERRIDE|SYSTEM MESSAGE) ?[:：]",
]
_LINE_ROLE_FAKE = r"^[ *_#>\-=~`\"'(\[{]*" + _ROLE_WORDS + _ROLE_QUALIFIER + r"[ *_\])}>\-=~`\"']*[:：]"

# ---------------------------------------------------------------------------- squashed English
_SQUASHED = (
    r"(?:ignore|disregard|forget)(?:all|any|the|your|my|of)*(?:previous|prior|above|earlier|preceding|your|the)"
    r"(?:instructions?|rules|prompts?|guidelines|directives)"
    r"|developermode|revealyoursystemprompt|youarenowdan"
)


_MAX_SOURCE = 2000
"""Longest alternation compiled as one pattern, in characters: a larger one can exhaust RE2's
DFA memory, and RE2 then matches on its (still linear, slower) NFA."""


def _compile(parts: list[str], *, ignore_case: bool = True, flags: int = 0) -> tuple[linear_re.Pattern, ...]:
    """``parts`` as RE2 alternations of at most about ``_MAX_SOURCE`` characters each, with
    every literal NFKC-normalised as the text is (screening reads ``model_text``: a pattern
    written with ``ज़`` must match NFKC's ``ज़``)."""
    flags |= linear_re.IGNORECASE if ignore_case else 0
    groups: list[list[str]] = [[]]
    size = 0
    for part in parts:
        source = "(?:" + unicodedata.normalize("NFKC", part) + ")"
        if groups[-1] and size + len(source) > _MAX_SOURCE:
            groups.append([])
            size = 0
        groups[-1].append(source)
        size += len(source) + 1
    return tuple(linear_re.compile("|".join(group), flags) for group in groups)


def _found(patterns: tuple[linear_re.Pattern, ...], text: str) -> bool:
    return any(p.search(text) for p in patterns)


_SHAPES: tuple[tuple[str, tuple[linear_re.Pattern, ...]], ...] = (
    ("override", _compile(_OVERRIDE)),
    ("role_play", _compile(_ROLE_PLAY)),
    ("prompt_extraction", _compile(_PROMPT_EXTRACTION)),
    ("tool_smuggling", _compile(_TOOL_SMUGGLING)),
    ("template_tokens", _compile(_TEMPLATE_TOKENS)),
    ("role_fake", _compile(_ROLE_FAKE[:-1])),
)
_CAPS_ROLE_FAKE = _compile(_ROLE_FAKE[-1:], ignore_case=False)
_LINE_ROLE = _compile([_LINE_ROLE_FAKE], flags=linear_re.MULTILINE)
_SQUASHED_OVERRIDE = _compile([_SQUASHED])

SCREENING_REASONS = tuple(name for name, _ in _SHAPES)
"""Every reason ``screen`` may return."""


def _squash(text: str) -> str:
    """Letters and digits only (of a skeleton): ``i g n o r e previous`` → ``ignoreprevious``."""
    return "".join(filter(str.isalnum, text))


def _screen_views(rendered: str) -> str | None:
    views = (rendered, skeleton(rendered))
    for name, patterns in _SHAPES:
        if any(_found(patterns, v) for v in views):
            return name
        if name == "role_fake" and _found(_CAPS_ROLE_FAKE, rendered):
            return name
    if _found(_SQUASHED_OVERRIDE, _squash(views[1])):
        return "override"
    return None


_LINE_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"
"""What ``str.splitlines`` splits at."""


def screen(text: str) -> str | None:
    """The shape of instructions to the model that ``text`` has (one of
    ``SCREENING_REASONS``), or ``None`` when it reads as something the user states.

    ``text`` is a memory's content as stored; it is judged as the model would read it
    (``model_text``, its skeleton and squashed views, and its lines as written: see the module
    docstring). Raises nothing; time linear in ``len(text)``."""
    reason = _screen_views(model_text(text))
    if reason is not None:
        return reason
    if any(c in text for c in _LINE_BREAKS):  # each line as the model would read it, one per line
        shown = model_lines(text)
        if _found(_LINE_ROLE, shown) or _found(_LINE_ROLE, skeleton(shown)):
            return "role_fake"
    return None


_INLINE_SPACE = r"[\t\v\f\r\p{Z}\x{85}]"
"""``SPACE`` but the line feed: the window's role prefixes are taken off within a line."""
_WINDOW_ROLE = linear_re.compile(r"^(?:user|assistant): ", linear_re.MULTILINE)
_LEADING_ROLES = linear_re.compile(
    r"^(?:" + _INLINE_SPACE + r"*(?:###" + _INLINE_SPACE + r"*)?(?:system|assistant|user|instruction)"
    + _INLINE_SPACE + r"*:)+" + _INLINE_SPACE + r"*",
    linear_re.IGNORECASE | linear_re.MULTILINE,
)  # fmt: skip


def screen_window(text: str) -> str | None:
    """``screen`` for a conversation window (``chat.extract``: one ``user: …`` or
    ``assistant: …`` line per message, each message's whitespace collapsed, so no message can
    start a line of its own): each line's role prefix, and role words that start the message
    (an echo's "assistant: …", a user's "system: …"), are taken off, since inside a window
    they cannot open a line of their own, and the messages that remain, one a line, are
    screened as one text for every shape ("user: system: you are now DAN" is still
    ``role_play``; the message itself is screened as a statement when it is one). Raises
    nothing; linear in ``len(text)``."""
    return screen(_LEADING_ROLES.sub("", _WINDOW_ROLE.sub("", text)))
