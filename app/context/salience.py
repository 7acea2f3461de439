"""Salience: does a sentence carry something an agent will need after it has scrolled away?

The kind patterns of app.context.facts recognise facts by their phrasing ("set X to Y",
"we decided to ..."). People state facts in countless other wordings ("PRs go to
release-7 until further notice", "Messaging will run on NATS", "Hands off vendor/x/"),
so this module scores a sentence on two things that survive rewording:

- a **concrete value**: something the agent cannot guess and must copy exactly later, such
  as a code literal, a path, a URL, an e-mail, a host and port, an id, a version, a number
  with a unit, a time with its zone, a date, a quoted literal, or a name written like
  one (a capitalised word in mid-sentence, CamelCase, an acronym, a code-style token);
- a **commitment**: words that make the sentence binding for later, such as an obligation
  or prohibition ("has to", "should be", "nobody", "hands off"), a condition on what others
  do ("unless", "before anybody commits"), a decision or a change ("will run on", "switching
  to", "from today", "instead", "is X now", "we changed our minds"), a preference or a
  polite request ("please just run"), or a marker that the speaker wants it remembered
  ("reminder", "heads-up", "FYI").

Against those: questions (a fact is stated, not asked), hedges ("maybe", "I think"), and
the assistant narrating its own next step ("let me", "I'll"). Tool output is bulk, so it
needs a stronger value to count. The weights are coarse on purpose (a value is worth 1-2
points, a commitment 1-2, the threshold is 3): a sentence needs a value *and* something
that makes it binding, or a very concrete value stated by the user.

Pure and deterministic: regexes only, the same sentence always scores the same.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

_I = re.IGNORECASE

# -- concrete values ------------------------------------------------------------------------
# (name, pattern, weight). A sentence's value score is the largest weight it matches plus
# 0.5 for each further distinct sort, so one strong value counts fully and several add up.
_VALUES: tuple[tuple[str, re.Pattern, float], ...] = (
    ("exception", re.compile(r"\b[A-Z]\w*(?:Exception|Error)\b"), 2.0),
    ("code", re.compile(r"`[^`\n]{1,80}`"), 2.0),
    ("url", re.compile(r"\bhttps?://\S+", _I), 2.0),
    ("email", re.compile(r"(?<![\w.+-])[\w.+-]++@[\w-]+(?:\.[\w-]+)+\b"), 2.0),
    ("path", re.compile(
        r"(?<![\w:/.])(?:~|\.{1,2})?/[\w.@+-]+(?:/[\w.@+-]+)+/?"          # /srv/app/x
        r"|(?<![\w.-])(?<![\w.-]/)[\w.-]++(?:/[\w.@+-]++)*+/(?=[\s,;:.)]|$)"           # vendor/gen/ (a directory)
        r"|(?<![\w.-])(?<![\w.-]/)[\w.-]++/[\w./-]*\.[A-Za-z0-9]{1,8}\b"), 2.0),       # app/x.py
    ("host", re.compile(r"(?<![\w.-])(?:[a-z0-9-]+\.)+(?:internal|local|com|net|org|io|dev|cloud)\b(?::\d{2,5})?"
                        r"|(?<![\w.-])[\w.-]++:\d{2,5}\b|\bport\s+\d{2,5}\b|\b\d{1,3}(?:\.\d{1,3}){3}\b", _I), 2.0),
    ("id", re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"
                      r"|\b[A-Z][A-Z0-9]{1,9}-\d{1,7}\b|#\d{2,}\b|(?<![\d.,])\b\d{6,}\b"), 2.0),
    # A file named without its directory (requirements.txt, values-prod.yaml): a value the
    # agent must copy as much as a path.
    ("file", re.compile(r"(?<![\w./-])[\w-]+(?:\.[\w-]+)*\.(?:txt|ya?ml|json|toml|ini|cfg|conf|env|lock|py|js|ts"
                        r"|go|rs|java|rb|sql|sh|md|csv|xml|properties|tf)\b"), 1.5),
    ("version", re.compile(r"\bv\d+(?:\.\d+)*\b|\b\d+\.\d+\.\d+\b"), 1.5),
    # A code-style token: words joined by - _ . with a digit or an underscore in them
    # (release-train-25, us-east-1, max_retries), or CamelCase (DynamoDB, PostgreSQL).
    ("token", re.compile(r"(?<![\w.-])-{0,2}(?=[\w.-]*[\d_])[A-Za-z][\w]*(?:[-_.][\w]+)+\b"
                         r"|\b[A-Z][a-z]+[A-Z]\w*\b|\b[a-z]+[A-Z]\w*\b"), 1.5),
    ("time", re.compile(r"\b\d{1,2}(?::\d{2})?\s?(?:[ap]\.?m\.?)?\s?(?:UTC|GMT|CES?T|PS?T|PDT|ES?T|EDT|IST|JST|AEST)\b"
                        r"|\b(?:Europe|America|Asia|Africa|Australia|Pacific)/[A-Z][A-Za-z_]+\b"
                        r"|\b\d{1,2}:\d{2}\b|\b\d{1,2}\s?[ap]m\b", _I), 2.0),
    ("date", re.compile(r"\b\d{4}-\d{2}-\d{2}\b|\b(?:Mon|Tues|Wednes|Thurs|Fri|Satur|Sun)day\b"
                        r"|\b(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]*\.?\s+\d{1,2}\b"
                        r"|\b\d{1,2}(?:st|nd|rd|th)?\s+"
                        r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]*\b"), 1.5),
    ("amount", re.compile(r"[$€£]\s?\d[\d,.]*\s?[kKmM]?\b"
                          r"|(?<![\w.,])\d[\d,.]*+\s?(?:%|[KMGT]i?B|ms|s|sec|seconds?|min(?:utes?)?"
                          r"|h|hours?|days?|weeks?|cores?|CPUs?|GPUs?|replicas?|workers?|rps|req/s"
                          r"|USD|EUR|GBP)\b"), 1.5),
    # A shell command. "make" and "go" are English verbs too ("make it happen", "go do"),
    # so they count only before a code-like word (make lint-api, go test ./...).
    ("command", re.compile(r"\b(?:npm|npx|yarn|pnpm|pip|pytest|tox|git|docker|kubectl|helm|cargo|python3?"
                           r"|terraform|ansible|bazel|gradle|mvn)\s+-{0,2}[a-z][\w:./=@-]*"
                           r"|\b(?:make|go)\s+(?:-\w+|[a-z]\w*[-_:/.=][\w:./=@-]+|test\s+\./)"), 1.5),
    ("quoted", re.compile(r"\"[^\"\n]{1,40}\"|(?<!\w)'[^'\n]{1,40}'(?!\w)|[\u201c][^\u201d\n]{1,40}[\u201d]"), 1.5),
    ("acronym", re.compile(r"\b[A-Z]{3,}\d*\b"), 1.0),
    ("number", re.compile(r"(?<![\w.])\d{2,}(?![\w.])"), 0.5),
)
# A capitalised word in mid-sentence is a name (Kafka, Memcached, Priya) unless it is one
# of the words people capitalise anyway.
_MID_CAPITAL = re.compile(r"(?<=[^\s.!?:]\s)[A-Z][a-z]{2,}\b|(?<=[=>(]\s)[A-Z][a-z]{2,}\b")
_NOT_NAMES = {"I", "The", "This", "That", "It", "We", "You", "They", "He", "She", "And", "But", "Or",
              "So", "Then", "Also", "Please", "Thanks", "Yes", "No", "Okay", "Ok", "Sure", "Let",
              "English", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"}

# -- commitments ----------------------------------------------------------------------------
_COMMITMENTS: tuple[tuple[str, re.Pattern, float], ...] = (
    ("obligation", re.compile(
        r"\b(?:must(?!\s+have\s+been|'ve)|has\s+to|have\s+to|had\s+better|needs?\s+to\s+be|required|mandatory|shall"
        r"|should(?:n't|\s+not)?\s+(?:be|go|use|run|stay|point|target|always|never|only)"
        r"|(?:is|are)\s+(?:not\s+)?allowed|may\s+not|can(?:no|')t(?!\s+(?:wait|believe|imagine))"
        r"|only\s+(?:ever|use|run|deploy|push)"
        # a required approval: "needs sign-off from compliance", "requires two approvals"
        r"|(?:needs?|requires?)\s+(?:\w+\s+){0,2}(?:sign[\s-]?offs?|approvals?|reviews?|reviewers?|acks?|go-ahead"
        r"|green\s+light|lgtm|ok)(?=\W|$))\b", _I), 2.0),
    # A condition on what others do binds as much as "must": "the hook rejects you unless
    # the linter is clean", "before anybody commits, run ...".
    ("condition", re.compile(
        r"\b(?:unless|only\s+if|as\s+long\s+as|will\s+(?:reject|refuse|block)"
        r"|before\s+(?:you|anyone|anybody|everyone|everybody|we|committing|merging|pushing|deploying|releasing|shipping"
        r"|(?:the\s+|a\s+|any\s+)?(?:merge|deploy(?:ment)?|release|rollout|launch|cutover|go[\s-]live)))\b",
        _I), 2.0),
    ("prohibition", re.compile(
        r"\b(?:never|don't|do\s+not|nobody|no\s+one|hands\s+off|leave\s+\w+(?:\s+\w+){0,3}\s+alone"
        r"|off[\s-]limits|forbidden|locked|frozen|closed|keep\s+out)\b", _I), 2.0),
    # A bound on a quantity binds like a rule: "at most 2,500 per run", "no more than 3".
    ("limit", re.compile(r"\b(?:at\s+(?:most|least)|no\s+(?:more|fewer|less)\s+than|not\s+(?:more|less)\s+than"
                         r"|up\s+to|maximum\s+of|minimum\s+of|a\s+max(?:imum)?\s+of|caps?\s+(?:of|at)|capped"
                         r"|limit(?:ed)?\s+(?:of|to|is)|quota\s+of|ceiling\s+of)\s+(?:\w+\s+)?[\d$\u20ac\u00a3]",
                         _I), 2.0),
    ("every", re.compile(r"\b(?:always|every\s+(?:single\s+)?(?:time|commit|deploy|release|change|run)"
                         r"|each\s+(?:time|commit|deploy|release))\b", _I), 1.5),
    ("decision", re.compile(
        r"\b(?:decided|decision|agreed|settled|chose|chosen|picked|opted|going\s+with|go\s+with"
        r"|will\s+(?:use|run|live|be|go|move|stay|ship|happen|land|sit)|going\s+to\s+(?!be\s+(?:fine|ok))"
        r"|(?:switch|mov|chang|updat|bump|rais|lower|reduc|increas|slipp|push|replac|pinn?)(?:e|es|ed|ing|s)?\s+(?:[\w.-]+\s+){0,3}to"
        r"|replac(?:e|es|ed|ing)|supersed\w*|overrid\w*|\bnow\s*[.!]?\s*$|from\s+now\s+on|from\s+today|going\s+forward|until\s+further\s+notice"
        r"|instead|rather\s+than|the\s+plan\s+is|scratch|new\s+\w+(?:\s+\w+)?\s*:|(?:is|are)\s+now\b|now\s+(?:is|are)\b"
        r"|no\s+longer|approved|signed\s+off|capped\s+at|limited\s+to"
        r"|changed\s+(?:our|my|their|the)\s+minds?|forget\s+what\s+(?:i|we)\s+said|scrap\s+that"
        r"|set\s+to|defaults?\s+to|lives?\s+(?:in|at|on)|goes\s+to|go\s+to|sits?\s+in"
        r"|is\s+(?:at|in|on)\s)\b", _I), 2.0),
    # A request is an instruction said politely: "please (just) run / use / keep ...".
    ("preference", re.compile(r"\b(?:prefer|i'd\s+rather|we'd\s+rather|let's|stick\s+(?:to|with)"
                              r"|please\s+(?:just\s+|always\s+|also\s+)?(?:use|run|keep|check|add|set|put|send"
                              r"|tag|reference|include|follow|make\s+sure))\b", _I), 1.5),
    ("remember", re.compile(r"\b(?:reminder|remember|important|note|fyi|heads[\s-]up|for\s+the\s+record"
                            r"|update|correction"
                            r"|keep\s+in\s+mind|btw)\b", _I), 1.0),
    ("definition", re.compile(r"\b(?:is|are|was)\s+(?:the|our|your|a)?\s*\w*\s*(?:id|key|name|host|address|number"
                              r"|owner|contact|url|path|port|branch|tenant|account|limit|budget|deadline)\b"
                              r"|\s(?:=|->|=>|\u2192)\s*\S", _I), 1.5),
)

# -- against --------------------------------------------------------------------------------
# A question asks; a tag question ("..., okay?", "..., right?") states and checks.
_QUESTION = re.compile(r"(?<!,\sokay)(?<!,\sok)(?<!,\sright)(?<!,\syeah)\?\s*[)\"']?\s*$", _I)
_ASKS = re.compile(r"^(?:[A-Z][a-z]+:\s+)?(?:should|shall|can|could|would|will|do|does|did|is|are|was|were|have|has"
                   r"|what|where|when|which|who|why|how)\b", _I)
_HEDGE = re.compile(r"\b(?:maybe|perhaps|might|probably|not\s+sure|i\s+think|i\s+guess|i\s+wonder|could\s+we"
                    r"|what\s+if|no\s+idea|i\s+don't\s+know|seems?\s+like|looks?\s+like)\b", _I)
_NARRATION = re.compile(r"^(?:ok(?:ay)?[,.]?\s+)?(?:let\s+me|i'll|i\s+will|i'm\s+going\s+to|i\s+am\s+going\s+to"
                        r"|i\s+need\s+to|next\s+i|now\s+i|running|checking|looking|reading)\b", _I)
_ROLE_BONUS = {"user": 1.0, "system": 1.0, "assistant": 0.0, "tool": -1.0}

THRESHOLD = 3.0


@dataclass(frozen=True)
class Salience:
    score: float
    values: tuple[str, ...]        # the sorts of concrete value found, strongest first
    commitments: tuple[str, ...]   # the sorts of commitment found, strongest first

    strongest_value: float = 0.0

    @property
    def is_fact(self) -> bool:
        """Over the threshold, and with a value an agent must copy. A name alone ("Thanks,
        Gina!") is no such value unless something makes the sentence binding."""
        return self.score >= THRESHOLD and bool(self.values) and (self.strongest_value >= 1.5 or bool(self.commitments))


    @property
    def is_rule(self) -> bool:
        """Over the threshold on binding words alone: a rule ("nobody merges on Fridays")
        binds whether or not it names a value."""
        return self.score >= THRESHOLD and any(c in _RULES for c in self.commitments)


_RULES = frozenset({"obligation", "prohibition", "condition", "limit"})


# A name used to address someone ("Thanks, Gina!", "Hey Mel") says who is spoken to, not a
# value: after a comma, a greeting or thanks.
_VOCATIVE_BEFORE = re.compile(r"(?:,|\b(?:hey|hi|hello|thanks|thank\s+you|bye|yes|yeah|yep|no|ok|okay|sure|wow|oh"
                              r"|congrats|congratulations|sorry|dear|cheers|welcome|morning|night))\s$", _I)


def _names(sentence: str) -> bool:
    return any(m.group(0) not in _NOT_NAMES and not _VOCATIVE_BEFORE.search(sentence[:m.start()])
               for m in _MID_CAPITAL.finditer(sentence))


def _sum(found: list[tuple[str, float]]) -> float:
    """The largest weight counts fully, each further distinct sort adds 0.5."""
    if not found:
        return 0.0
    weights = sorted((w for _, w in found), reverse=True)
    return weights[0] + 0.5 * (len(weights) - 1)


# "Broker: Kafka.", "Sessions -> Couchbase": a label and a short value, the way tickets,
# notes and terse chat state a setting. The value is whatever follows the label.
_LABELLED = re.compile(r"^[^:=>\u2192]{2,50}?(?::|=|->|=>|\u2192)\s*(?P<value>[^\s].{0,60}?)\s*[.!]?\s*$")
# Short declaratives carry a value more often than long narration does; a bonus when short.
SHORT_WORDS = 10


# A value is a noun phrase, not a clause or an exclamation: "Gina: That's the spirit!" and
# "Caroline: Hey Mel!" are a speaker and what she says.
_CLAUSE_WORDS = re.compile(r"!|,\s|\b(?:yep|yup|nope|ha|haha|lol|hmm|ok|okay|sure|cool|nice|great|totally|awesome"
                           r"|congrats|woohoo|i|i'm|i've|you|you're|we|we're|he|she|they|it|it's|that|that's|this|there"
                           r"|is|are|was|were|am|be|been|do|did|does|so|too|very|really|just|hey|hi|hello"
                           r"|thanks|thank|yes|yeah|no|wow|oh|agreed?)\b", _I)


def _labelled_value(sentence: str) -> bool:
    m = _LABELLED.match(sentence)
    return (m is not None and len(m.group("value").split()) <= 4 and "://" not in sentence[:m.start("value")]
            and not _CLAUSE_WORDS.search(sentence[m.start("value"):]))


# "Ben: the ticket is X": the speaker's label is not part of what is said (mirrors the one
# in app.context.facts, which strips it from supersession keys).
_SPEAKER = re.compile(r"^(?!(?:Update|Note|Decision|Correction|Reminder|Important|Warning|Summary|Status|Todo"
                      r"|Heads|Fyi|Approved|Change)\b)[A-Z][a-z]+(?:\s[A-Z][a-z]+)?:\s+(?=\S+\s+\S+\s+\S)")


def is_question(sentence: str) -> bool:
    """Asks rather than states: ends in "?" and is no tag question ("..., okay?") unless it
    opens like a question ("Should we ..., okay?")."""
    return bool(_QUESTION.search(sentence)) or (sentence.rstrip().endswith("?") and bool(_ASKS.match(sentence)))


def is_hedged(sentence: str) -> bool:
    """Says it is unsure ("maybe", "I think", "looks like"): a guess, not a fact."""
    return bool(_HEDGE.search(sentence))


def score(sentence: str, role: str = "user") -> Salience:
    sentence = _SPEAKER.sub("", sentence)
    values = [(name, weight) for name, pattern, weight in _VALUES if pattern.search(sentence)]
    if _names(sentence):
        values.append(("name", 1.5))
    commitments = [(name, weight) for name, pattern, weight in _COMMITMENTS if pattern.search(sentence)]
    if _labelled_value(sentence):
        values.append(("labelled", 1.5))
        if all(name != "definition" for name, _ in commitments):
            commitments.append(("definition", 1.5))  # "Broker: Kafka" defines what the broker is
    total = _sum(values) + min(_sum(commitments), 3.0) + _ROLE_BONUS.get(role, 0.0)
    if values and role != "tool" and len(sentence.split()) <= SHORT_WORDS:  # tool lines are all short
        total += 1.0
    if is_question(sentence):
        total -= 4.0
    if _HEDGE.search(sentence):
        total -= 1.5
    if role != "user" and _NARRATION.search(sentence):
        total -= 1.5
    by_weight = lambda found: tuple(n for n, _ in sorted(found, key=lambda x: -x[1]))  # noqa: E731
    return Salience(total, by_weight(values), by_weight(commitments), max((w for _, w in values), default=0.0))
