"""Extra training pairs for the second opinion (``memory_core.curation.second_opinion``),
beside the dev split of ``labelled.jsonl``.

Provenance: written by hand for memory-router on 2026-12-02, after the dev/holdout split of
``labelled.jsonl`` was fixed, by an engineer who had read only dev pairs (never a holdout
pair, never ``pairs_en.py`` / ``pairs_other.py``, which hold both halves). They are new
facts, not rewordings of dev pairs, in the six languages of the set; only ever used to fit
the second opinion (``fit_second_opinion.py``), never to measure it. Licence: the project's.

Rows: ``(lang, kind, label, old, new)``; labels as in ``labelled.jsonl``.
"""

from __future__ import annotations

PAIRS: list[tuple[str, str, str, str, str]] = [
    # ---------------------------------------------------------------- en: supersedes
    (
        "en",
        "place",
        "supersedes",
        "I rent a room in Leeds.",
        "I bought a house in York last month and moved out of Leeds.",
    ),
    ("en", "place", "supersedes", "We're based in Austin.", "We relocated to Denver in the spring."),
    (
        "en",
        "job",
        "supersedes",
        "I teach maths at a secondary school.",
        "I left teaching and now work as a data analyst.",
    ),
    ("en", "job", "supersedes", "My manager is Priya.", "Priya moved teams, so Tom is my manager now."),
    ("en", "relation", "supersedes", "I'm engaged to Marco.", "Marco and I got married in June."),
    ("en", "relation", "supersedes", "I'm seeing someone named Alex.", "Alex and I split up a few weeks ago."),
    ("en", "number", "supersedes", "My shoe size is 9.", "My feet grew, I'm a size 10 these days."),
    ("en", "number", "supersedes", "I run about 20 km a week.", "I'm up to 35 km a week now."),
    ("en", "date", "supersedes", "My dentist appointment is on May 4.", "The dentist moved my appointment to May 11."),
    ("en", "schedule", "supersedes", "Team standup is at 9:00.", "Standup got pushed to 10:30 starting this sprint."),
    ("en", "preference", "supersedes", "I drink my coffee black.", "These days I take oat milk in my coffee."),
    (
        "en",
        "preference",
        "supersedes",
        "My favourite series is The Wire.",
        "Honestly Succession has replaced The Wire as my favourite.",
    ),
    ("en", "tool", "supersedes", "I take notes in Evernote.", "I migrated all my notes from Evernote to Obsidian."),
    ("en", "tool", "supersedes", "I code in Sublime Text.", "I gave up Sublime Text for VS Code."),
    ("en", "health", "supersedes", "I take 50 mg of sertraline.", "My doctor raised my sertraline to 100 mg."),
    ("en", "health", "supersedes", "I have a broken wrist.", "The cast came off, my wrist has healed."),
    (
        "en",
        "plan",
        "supersedes",
        "I'm planning to run the Berlin marathon.",
        "I pulled out of the Berlin marathon because of my knee.",
    ),
    ("en", "plan", "supersedes", "We're going to adopt a puppy.", "We brought home our puppy, Biscuit, on Saturday."),
    ("en", "negation", "supersedes", "I own a motorbike.", "I don't have the motorbike anymore."),
    ("en", "negation", "supersedes", "I'm a member of the chess club.", "I'm not in the chess club any longer."),
    # ---------------------------------------------------------------- en: compatible
    ("en", "place", "compatible", "I live in Cardiff.", "My brother lives in Swansea."),
    ("en", "place", "compatible", "I grew up in Ohio.", "I live in Seattle."),
    ("en", "job", "compatible", "I work at a hospital.", "I also volunteer at a food bank on Sundays."),
    ("en", "job", "compatible", "I'm a nurse.", "My wife is a nurse too."),
    ("en", "relation", "compatible", "My sister is called Ruth.", "My other sister is called Naomi."),
    ("en", "number", "compatible", "I have two cats.", "One of my cats is 12 years old."),
    ("en", "date", "compatible", "My birthday is on July 9.", "My husband's birthday is on July 21."),
    ("en", "schedule", "compatible", "I go to yoga on Tuesdays.", "I play squash on Thursdays."),
    ("en", "preference", "compatible", "I love Thai food.", "I also really like Ethiopian food."),
    ("en", "preference", "compatible", "My favourite colour is green.", "My favourite season is autumn."),
    ("en", "tool", "compatible", "I use a Kindle for novels.", "I read comics on my iPad."),
    ("en", "health", "compatible", "I'm allergic to cats.", "I'm allergic to penicillin as well."),
    ("en", "plan", "compatible", "I want to visit Japan next year.", "I'm saving up for a new laptop."),
    ("en", "negation", "compatible", "I don't eat pork.", "I eat chicken and fish."),
    ("en", "place", "compatible", "We spent Christmas at my parents' in Kent.", "We live in London."),
    ("en", "tool", "compatible", "At work I use Outlook.", "For personal mail I use Gmail."),
    # ---------------------------------------------------------------- en: duplicate / refinement
    ("en", "job", "duplicate", "I'm a software engineer at Spotify.", "I work at Spotify as a software engineer."),
    ("en", "preference", "duplicate", "I'm not a fan of horror films.", "I don't really like horror movies."),
    ("en", "place", "refinement", "I live in Madrid.", "I live in Madrid, in Malasaña, close to the Gran Vía."),
    ("en", "health", "refinement", "I have asthma.", "I have mild asthma and use an inhaler before running."),
    # ---------------------------------------------------------------- es
    ("es", "place", "supersedes", "Vivo en Valencia.", "Ya no vivo en Valencia, me mudé a Bilbao."),
    ("es", "job", "supersedes", "Soy camarero en un bar del centro.", "Dejé el bar y ahora trabajo de repartidor."),
    ("es", "relation", "supersedes", "Estoy soltero.", "Desde el verano tengo novia, se llama Lucía."),
    ("es", "preference", "supersedes", "Mi serie favorita es Friends.", "Ahora mi serie favorita es The Office."),
    ("es", "tool", "supersedes", "Uso un iPhone.", "Cambié el iPhone por un Samsung."),
    ("es", "schedule", "supersedes", "El gimnasio lo hago a las siete.", "Ahora voy al gimnasio a las nueve."),
    ("es", "negation", "supersedes", "Tomo café todas las mañanas.", "Ya no tomo café, solo té."),
    ("es", "place", "compatible", "Vivo en Sevilla.", "Mi hermano vive en Granada."),
    ("es", "preference", "compatible", "Me gusta el cine de terror.", "También me gustan las comedias."),
    ("es", "job", "compatible", "Trabajo en una farmacia.", "Los fines de semana doy clases de guitarra."),
    ("es", "number", "compatible", "Tengo tres hermanos.", "Mi hermano mayor tiene cuarenta años."),
    ("es", "preference", "duplicate", "Me encanta el chocolate.", "El chocolate me encanta."),
    # ---------------------------------------------------------------- fr
    ("fr", "place", "supersedes", "J'habite à Nantes.", "J'ai déménagé à Rennes le mois dernier."),
    ("fr", "job", "supersedes", "Je suis comptable chez Total.", "J'ai quitté Total, je suis maintenant chez Airbus."),
    ("fr", "relation", "supersedes", "Je suis marié avec Claire.", "Claire et moi avons divorcé."),
    ("fr", "preference", "supersedes", "Je préfère le thé.", "Maintenant je préfère le café."),
    ("fr", "health", "supersedes", "Je fume un paquet par jour.", "J'ai arrêté de fumer il y a trois mois."),
    ("fr", "schedule", "supersedes", "Mon cours de danse est le lundi.", "Mon cours de danse est passé au mercredi."),
    ("fr", "place", "compatible", "J'habite à Lyon.", "Ma sœur habite à Marseille."),
    ("fr", "preference", "compatible", "J'aime le jazz.", "J'aime aussi la musique classique."),
    ("fr", "tool", "compatible", "J'utilise Linux au bureau.", "À la maison j'ai un Mac."),
    ("fr", "number", "compatible", "J'ai deux enfants.", "Mon fils aîné a dix ans."),
    ("fr", "job", "duplicate", "Je suis infirmière.", "Je travaille comme infirmière."),
    # ---------------------------------------------------------------- de
    ("de", "place", "supersedes", "Ich wohne in Köln.", "Ich bin nach Hamburg umgezogen."),
    ("de", "job", "supersedes", "Ich arbeite als Lehrer.", "Ich bin jetzt kein Lehrer mehr, sondern Programmierer."),
    ("de", "preference", "supersedes", "Ich trinke gern Bier.", "Ich trinke keinen Alkohol mehr."),
    (
        "de",
        "tool",
        "supersedes",
        "Ich fahre einen VW Golf.",
        "Den Golf habe ich verkauft, jetzt fahre ich einen Tesla.",
    ),
    ("de", "relation", "supersedes", "Mein Freund heißt Jonas.", "Jonas und ich haben uns getrennt."),
    ("de", "place", "compatible", "Ich wohne in München.", "Meine Eltern wohnen in Stuttgart."),
    ("de", "preference", "compatible", "Ich mag Katzen.", "Ich mag auch Hunde."),
    ("de", "schedule", "compatible", "Dienstags gehe ich schwimmen.", "Freitags spiele ich Fußball."),
    ("de", "job", "duplicate", "Ich bin Ärztin.", "Ich arbeite als Ärztin."),
    # ---------------------------------------------------------------- zh
    ("zh", "place", "supersedes", "我住在广州。", "我已经搬到深圳了。"),
    ("zh", "job", "supersedes", "我在腾讯工作。", "我从腾讯辞职了，现在在阿里巴巴上班。"),
    ("zh", "relation", "supersedes", "我有女朋友。", "我和女朋友分手了。"),
    ("zh", "preference", "supersedes", "我喜欢喝咖啡。", "我现在不喝咖啡了，改喝茶。"),
    ("zh", "health", "supersedes", "我每天抽烟。", "我已经戒烟了。"),
    ("zh", "place", "compatible", "我住在上海。", "我妈妈住在杭州。"),
    ("zh", "preference", "compatible", "我喜欢吃火锅。", "我也喜欢吃烤鸭。"),
    ("zh", "job", "compatible", "我是医生。", "我周末喜欢爬山。"),
    ("zh", "number", "duplicate", "我今年三十岁。", "我三十岁了。"),
    # ---------------------------------------------------------------- ja
    ("ja", "place", "supersedes", "大阪に住んでいます。", "先月、東京に引っ越しました。"),
    ("ja", "job", "supersedes", "銀行で働いています。", "銀行を辞めて、今はフリーランスです。"),
    ("ja", "preference", "supersedes", "コーヒーが好きです。", "最近はコーヒーをやめて紅茶を飲んでいます。"),
    ("ja", "health", "supersedes", "タバコを吸っています。", "タバコはもうやめました。"),
    ("ja", "place", "compatible", "京都に住んでいます。", "兄は名古屋に住んでいます。"),
    ("ja", "preference", "compatible", "猫が好きです。", "犬も好きです。"),
    ("ja", "schedule", "compatible", "月曜日にジムに行きます。", "金曜日にピアノを習っています。"),
    ("ja", "job", "duplicate", "私は教師です。", "教師として働いています。"),
]
