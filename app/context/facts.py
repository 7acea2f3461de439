"""Deterministic key-fact extraction: the things agents forget after a compaction.

Pure regex and heuristics, no model: the same span always yields the same facts, so a
compaction can be replayed and audited, and extraction costs microseconds per message.

One fact per sentence (or per error line): a sentence that holds an instruction *and* an
identifier is one fact of the more important kind, because the view shows the sentence,
and showing it twice would spend tokens for nothing. The sentence, not just the matched
token, is kept because "ORD-48213" alone answers nothing; "the refund is for order
ORD-48213" does.

Supersession: every fact carries a ``key`` and a ``value``. Facts with the same key and a
different value contradict each other, and the later one supersedes the earlier (both are
kept; the compactor marks the old one). Keys come from assignment-like phrasing
("set X to Y", "X is Y", "X = Y", "use Y for X", "deadline is ..."), from rules with their
modal words removed ("always run X" vs "never run X"), or else from the fact's own text
(then only an identical sentence shares the key, and is a duplicate, not a contradiction).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from app.context import salience
from app.domain.context import FACT_KIND_PRIORITY

INSTRUCTION = "instruction"
DECISION = "decision"
ERROR = "error"
TODO = "todo"
IDENTIFIER = "identifier"
PATH = "path"
URL = "url"
QUANTITY = "quantity"
ENTITY = "entity"

# Lower number = more important; the domain owns the order because assemble_view ranks by it.
KIND_PRIORITY = FACT_KIND_PRIORITY
KINDS = tuple(KIND_PRIORITY)
assert set(KINDS) == {INSTRUCTION, DECISION, ERROR, TODO, IDENTIFIER, PATH, URL, QUANTITY, ENTITY}

MAX_FACT_CHARS = 300

# Recorded beside the facts a compaction produced: the same message and the same version
# always give the same facts, so a replay compares versions before it compares facts. Any
# change to what extract_facts returns for some input must change this string.
EXTRACTOR_VERSION = "facts-4"

_I = re.IGNORECASE

_URL = re.compile(r"\bhttps?://[^\s<>\"'`)\]]+", _I)
# Where a clause starts: the sentence start, or after a comma, semicolon, colon or dash,
# optionally after a softener. Imperatives are recognised only there, so "I don't know"
# and "we must have missed it" are not rules while "Please don't" and "so, never" are.
_CLAUSE = r"(?:^|[,;:]\s*|\s[-\u2013\u2014]\s*)(?:(?:please|and|but|so|also|then|just|ok|okay)[,]?\s+)*"
# Standing rules: modal words in the imperative or with "you/we" as subject, verbs that
# only ever state a rule (avoid, refrain, prefer, make sure ...), and prohibitions.
_INSTRUCTION = re.compile(
    _CLAUSE + r"(?:never|always|do\s+not|don't|avoid|refrain\s+from|prefer|stay\s+away\s+from"
    r"|make\s+sure|be\s+sure\s+to|ensure|remember\s+to|only\s+ever|keep|stick\s+to|respond|reply|answer"
    r"|write|ask\s+(?:me|us|first)|check\s+with\s+(?:me|us))\b"
    r"|\b(?:you|we)\s+(?:must|should|shall|need\s+to|have\s+to)?\s*(?:never|always)\s+(?!been\b)\w+(?<!ed)\b"
    r"|\b(?:must(?:\s+not)?|mustn't|shall(?:\s+not)?|should\s+not|shouldn't)\s+(?!have\b)(?:\w+\s+)?\w+"
    r"|\bunder\s+no\s+circumstances\b|\b(?:is|are)\s+(?:forbidden|prohibited|not\s+allowed)\b"
    r"|\b(?:from\s+now\s+on|from\s+here\s+on|going\s+forward|at\s+all\s+times)\b"
    r"|^(?:please\s+)?no\s+\w+(?:\s+\w+)?\s+(?:in|on|at|for|during|before|after|without|outside)\b"
    r"|" + _CLAUSE + r"use\s+[\w .+#-]{1,40}?(?:,\s*not\s|\s+(?:for|as|only|instead|rather)\b|\s+over\s)", _I)
# Idioms built from the words above that state no rule ("never mind", "don't worry"), and
# "must" as a guess ("it must be the cache", "we must have missed it").
_NOT_INSTRUCTION = re.compile(
    r"\bnever\s+mind\b|\bdon't\s+(?:worry|get\s+me\s+wrong)\b|\b(?:it|that|this|there)\s+must\s+be\b"
    r"|^(?:i|it|that|this|he|she|they)\s+(?:\w+\s+)?(?:never|always)\b|\b(?:i|he|she|they|it)\s+never\s+\w+ed\b"
    r"|\bnever\s+(?:said|told|meant|thought|knew|asked|did|was|were|had|wrote|saw|occurred)\b"
    r"|\b(?:was|were|is|are|has|have|had|been)\s+never\b"
    # encouragement and guesses, the imperatives of chat: "keep it up!", "must be so exciting"
    r"|\bkeep\s+(?:it\s+up|going|at\s+it|pushing|persevering|working|smiling|shining|rocking|fighting|dreaming"
    r"|up\s+the)\b|\bnever\s+give\s+up\b|\b(?:don't|do\s+not)\s+(?:give\s+up|quit|stop\s+\w+ing"
    r"|let\s+\w+\s+get\s+you\s+down|miss\s+a\s+beat|forget\s+to\s+(?:stay|have|enjoy|smile))\b"
    r"|^must\s+be\b|\byou\s+must\s+(?:be|feel)\b|\bmust\s+(?:be|feel)\s+(?:so\s+|really\s+|pretty\s+)?"
    r"(?:\w+ing|awesome|great|amazing|nice|fun|cool|hard|tough|proud|special|lovely|wonderful|excited)\b"
    r"|\?\s*$", _I)
# An imperative of work on a system at a clause start ("then skip the ACL step", "roll back to
# v3.18.1 now"): a closed list of verbs, because chat has imperatives too ("check this out",
# "have fun"). At least two more words, so "Don't quit!"-sized cheers stay out.
_DIRECTIVE = re.compile(
    r"(?:^|[;:]\s*)(?:(?:please|and|but|so|also|then|just|ok|okay|now)[,]?\s+)*(?:skip|drop|delete|remove|add|create"
    r"|re-?run|revert|roll\s+(?:back|out)|rotate|refund|tag|post|send|ping|open|merge|deploy|restart|bump|pin"
    r"|upgrade|downgrade|disable|enable|cap|limit|backfill|renew|install|migrate|commit|push|notify|escalate"
    r"|archive|rename|tell\s+the|ask\s+the|copy|wrap\s+(?:it\s+)?up|close\s+(?:the|out)|file\s+(?:a|an|the))"
    r"\s+\S+\s+\S+", _I)
_DECISION = re.compile(
    r"\b(?:we|i)\s+(?:have\s+)?decided\b|\bdecision\s*:|\bdecided\s+(?:to|against|on)\b|\bchose\b|\bchosen\b"
    r"|\bwill\s+use\b|\bgo(?:ing)?\s+with\b|\bwe\s+agreed\b|\bagreed\s+(?:to|that|on)\b|\bchange\s+of\s+plan\b"
    r"|\bsettled\s+on\b|\bopted\s+(?:for|to|against)\b|\bstick\s+with\b|\bfinal\s+call\b"
    r"|\bthe\s+plan\s+is\s+to\b|^\s*approved\s*:|\blet's\s+(?:use|go\s+with|adopt|pick|switch\s+to)\b"
    # a change the team is making: "we're replacing moment with date-fns", "X is taking over"
    r"|\b(?:we're|we\s+are|we'll|we\s+will)\s+(?:replacing|switching|moving|migrating|dropping|retiring|adopting"
    r"|standardi[sz]ing|deprecating|sunsetting)\b|\bis\s+(?:being\s+retired|taking\s+over)\b", _I)
# "need to" is a task only when it outlasts the sentence: someone else's, or still open.
# "I need to check the logs" is the agent narrating its next step, not a to-do.
_TODO = re.compile(
    r"\b(?:TODO|FIXME|XXX)\b|^\s*[-*]\s*\[ \]"
    r"|\b(?:still|also|later|eventually)\s+(?:need|needs|have|has)\s+to\b|\bstill\s+to\s+do\b"
    r"|(?<!\bif\s)\b(?:we|you|someone|somebody|they|the\s+team)\s+(?:still\s+)?(?:need|needs|have|has)\s+to\b"
    r"|^(?:(?:please|and|also|then|ok|okay)[,]?\s+)*follow[- ]up\s+(?:with|on)\b"
    r"|^\s*(?:follow[- ]up|remaining\s+work|open\s+item|left\s+to\s+do|to[- ]do|pending)\s*:", _I)
_ERROR = re.compile(
    r"\b[A-Z]\w*(?:Error|Exception)\b\s*:|^\s*(?:error|fatal|panic)\b\s*[:!]"
    r"|(?i:\berror\s*:|\bERR!|^\s*ERROR\b|\bsegmentation\s+fault\b|\bcore\s+dumped\b|\bpermission\s+denied\b"
    r"|\bno\s+such\s+file\s+or\s+directory\b|\bconnection\s+refused\b|\btimed\s+out\b|\bout\s+of\s+memory\b"
    r"|\bfailed\s+with\b|\bexit\s+(?:code|status)\s+[1-9]\d*\b|\baccess\s+denied\b"
    # how command-line tools word a failure: "An error occurred (AccessDenied) when calling",
    # "Error from server (NotFound)", "upload failed: ...", "... is not authorized to perform"
    r"|\ban\s+error\s+occurred\b|\berror\s+from\s+server\b|^\s*(?:[\w.-]+\s+){0,2}failed\s*:"
    r"|\bnot\s+authori[sz]ed\s+to\b"
    r"|\b(?:ci|build|pipeline|tests?|job|deploy|checks?)\s+(?:is|are|has\s+been|have\s+been|went|turned|stays?)"
    r"\s+(?:red|failing|broken|down)\b|\b(?:produced|returned|wrote|loaded)\s+(?:zero|no|0)\s+(?:rows|records|results"
    r"|events|items)\b|\bparsed\s+as\s+\S+(?:\s+\S+)?\s+instead\s+of\b)"
    r"|\bHTTP(?:/\d(?:\.\d)?)?\s+[45]\d\d\b|\bstatus(?:\s+code)?\s*[=:]?\s*[45]\d\d\b"
    r"|\b[45]\d\d\s+(?:Bad\s+Request|Unauthorized|Forbidden|Not\s+Found|Conflict|Too\s+Many\s+Requests"
    r"|Internal\s+Server\s+Error|Bad\s+Gateway|Service\s+Unavailable|Gateway\s+Timeout)\b", re.M)
_IDENTIFIER = re.compile(
    r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"      # UUID
    r"|\b[A-Z][A-Z0-9]{1,9}-\d{1,7}\b"                                         # ticket ABC-123
    r"|\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,64}\b"                    # git/sha hashes
    r"|\b\w*(?:id|ID|Id)\s*[=:#]\s*[\w.-]+"                                   # id=..., user_id: ...
    r"|\border\s*#\s*\d+|#\d{3,}\b"
    # a host, not a file: no slash before it, and no source-file extension ("app/x.py:74")
    r"|(?<![\w./-])[a-z0-9][\w-]{0,62}(?:\.[\w-]{1,63}){0,6}\.(?!(?:py|js|ts|tsx|jsx|go|rs|rb|java|kt|c|h|cc|cpp"
    r"|cs|php|sh|sql|ya?ml|json|toml|ini|cfg|md|txt|log|html|css|lock|xml)\b)[a-z][\w-]{0,62}"
    r"(?::\d{2,5}\b|\s+(?:on|at)\s+port\s+\d{2,5}\b"
    r"|,?\s+listening\s+on\s+(?:port\s+)?\d{2,5}\b)"                        # host:port, host on port N
    r"|(?<![\w&#])#[a-z][a-z0-9]*[-_][a-z0-9_-]+|\bchannel\s+#[a-z]\w*|(?<![\w&#])#[a-z]\w*\s+channel\b"  # #team-oncall
    r"|\b(?:[Nn]umber|[Nn]o\.|[Nn]um\.?)\s+(?:is\s+)?#?[\w-]*\d[\w-]*"                 # account number 8812..
    r"|(?<![\d.,])\b\d{8,}\b(?![.,]\d)", 0)                                     # long bare numbers are ids
_PATH = re.compile(
    r"(?<![\w:/.])(?:~|\.{1,2})?(?:/[\w.@+-]+){2,}/?"                          # /srv/app/x.yaml
    r"|(?<![\w.-])(?<![\w.-]/)[\w.-]++/[\w./-]*\.[A-Za-z0-9]{1,8}\b"                        # app/context/tokens.py
    r"|\b[A-Za-z]:\\(?:[\w .-]+\\)*[\w.-]+")                                   # C:\Users\x\y.txt
_UNITS = (
    r"ms|milliseconds?|s|secs?|seconds?|min|mins|minutes?|h|hrs?|hours?|days?|weeks?|months?|years?"
    r"|[KMGTP]i?B|bytes?|KB|kb|mb|gb|tb|%|percent|USD|EUR|GBP|dollars?|euros?|tokens?|req/s|rps|rpm|tpm"
    r"|qps|Hz|kHz|MHz|GHz|cores?|CPUs?|GPUs?|nodes?|replicas?|workers?|users?|requests?|rows?|items?"
    r"|km|m|cm|mm|kg|g|lbs?|°C|°F|x")
_MONTHS = (r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?"
           r"|Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)")
# Dates count as quantities: a deadline is a number with a unit of time, and it is the
# fact most often restated ("the deadline is now ...") and so most often superseded.
_WEEKDAYS = r"(?:Mon|Tues|Wednes|Thurs|Fri|Satur|Sun)day"
_QUANTITY = re.compile(
    r"\b" + _WEEKDAYS + r"\b|\b\d{1,2}(?::\d{2})?\s?[ap]m\b|\b\d{4}-\d{2}-\d{2}\b|\b\d{1,2}\s+" + _MONTHS
    + r"\b|\b" + _MONTHS + r"\s+\d{1,2}(?:st|nd|rd|th)?\b"
    r"|(?:[$€£]\s?\d[\d,]*(?:\.\d+)?(?:\s?[kKmMbB]n?)?)"
    r"|(?<![\w.,])\d[\d,]*+(?:\.\d+)?\s?(?:" + _UNITS + r")(?![\w])"
    r"|\b(?:two|three|four|five|six|seven|eight|nine|ten|twelve|fifteen|twenty|thirty|forty|sixty|ninety)\s+"
    r"(?:seconds|minutes|hours|days|weeks|months|replicas|workers|nodes|attempts|retries)\b"
    r"|(?<![\w.,])\d[\d,]*\s+(?:concurrent|parallel|active|simultaneous|total|failed|passing|failing)\s+"
    r"(?:users|requests|connections|jobs|tests|workers|sessions)\b")
# A dated personal event or plan ("yesterday I took the kids to the museum", "next month I'm
# having an art show"): in conversation, a statement pinned to a day is one a later question
# asks about ("when did ...?"). Questions are excluded before this is tried.
_RELATIVE_DATE = re.compile(
    r"\b(?:yesterday|last\s+(?:night|week|weekend|month|year|summer|fall|winter|spring|" + _WEEKDAYS + r")"
    r"|next\s+(?:week|weekend|month|year|summer|sprint|" + _WEEKDAYS + r")|this\s+(?:weekend|month)"
    r"|(?:a|one|two|three|four|five|six|few|couple\s+of|\d+)\s+(?:days?|weeks?|weekends?|months?|years?)\s+ago)\b", _I)
# A first-person event in conversation ("I just launched an ad campaign for my store", "we
# adopted a puppy last spring"): the facts of a person's life a later question asks about.
# A closed list of verbs, and an object that is not a pronoun, so "I made it!" stays out.
_FIRST_PERSON_EVENT = re.compile(
    r"^(?:[A-Z][a-z]+:\s+)?(?:(?:oh|so|yeah|yep|and|btw|well|also|guess\s+what)[,!.]?\s+|[^.!?]{0,30}?[,-]\s+)?"
    r"(?:i|we)(?:'ve|\s+have)?(?:\s+(?:just|recently|finally|also|even|actually))?\s+(?:started|launched|joined|opened"
    r"|made|painted|adopted|bought|got|signed\s+up|finished|went|took|ran|won|passed|applied|moved|lost|quit"
    r"|created|built|volunteered|attended|visited|met|found|shut\s+down|teamed\s+up|play|used\s+to)"
    r"\s+(?!(?:it|that|this|them|something|some)\b)\S+\s+\S+", _I)
# A stated liking in conversation ("I love camping trips with my fam", "my favorite book is
# ..."): what a person is later asked about. An object that is not a pronoun or a reaction
# to what was just said ("I love that!", "I love how you ...").
_PERSONAL_PREFERENCE = re.compile(
    r"^(?:[A-Z][a-z]+:\s+)?(?:(?:oh|so|yeah|yep|and|btw|well|also)[,!.]?\s+)?(?:i|we)\s+(?:really\s+|just\s+|totally\s+)?"
    r"(?:love|enjoy|adore|prefer)\s+(?!(?:it|that|this|you|them|your|how|seeing|the\s+way|hearing|when)\b)\S+\s+\S+"
    r"|\bmy\s+favou?rite\s+\w+|\b(?:i'm|i\s+am)\s+(?:really\s+|so\s+)?(?:passionate\s+about|a\s+(?:big\s+|huge\s+)?"
    r"fan\s+of|into)\s+\w+", _I)
# A deadline on a to-do: "by end of day Thursday", "before Friday 14:00 UTC", "until Monday
# 09:00 CET, then drop it". Said with an imperative, it outranks the rule the verb reads as.
_DEADLINE = re.compile(
    r"\b(?:by|before|until|till|no\s+later\s+than|due)\s+(?:the\s+)?(?:end\s+of\s+(?:the\s+)?(?:day|week|sprint|month)"
    r"|eod|eow|cob|tomorrow|tonight|noon|midnight|next\s+\w+|(?:this\s+)?" + _WEEKDAYS + r"|\d{4}-\d{2}-\d{2}"
    r"|" + _MONTHS + r"\s+\d{1,2}\b|\d{1,2}(?::\d{2})?\s?(?:[ap]m|utc|gmt)\b"
    r"|(?:the\s+)?(?:[\w-]+\s+){0,2}(?:review|meeting|call|standup|release|close|freeze|demo|cutover|deadline))", _I)
# What a sentence opens with when it is an imperative: not a pronoun, article or name.
_DECLARATIVE_START = re.compile(
    r"^(?:[A-Z][a-z]+:\s+)?(?:i|i'm|i've|i'll|i'd|we|we're|we've|we'll|you|you're|he|she|it|it's|they|they're|the|a|an"
    r"|this|that|these|those|my|our|your|his|her|their|its|there|here|what|when|where|which|who|how|why|if"
    r"|[A-Z][a-z]+\s+(?:is|are|was|will|has|had|said))\b", _I)
_NUMERIC_SETTING = re.compile(
    r"^\s*[A-Za-z_][\w.-]*\s*[=:]\s*-?\d[\d.,]*\s*$|\bset\s+\S.{0,60}?\s+to\s+-?\d", _I)
_ENTITY = re.compile(r"\b[A-Z][a-z]+(?:\s+(?:of|de|van|von|for)\s+[A-Z][a-z]+|\s+[A-Z][a-z]+)+\b")
_ENTITY_STOP = {"The", "A", "An", "We", "I", "It", "This", "That", "These", "Those", "Our", "My",
                "Your", "If", "When", "Then", "So", "And", "But", "Or", "Please", "Also", "Let",
                "Yes", "No", "Ok", "Okay", "Next", "Now", "Here", "There", "Note", "Decision",
                "Change", "Set", "Use", "Always", "Never", "Do", "Don't", "Must", "Done",
                "Running", "Checking", "Reading", "Looking", "Good", "Great", "Thanks", "Sure",
                # greetings: "Hey Mel", "Congrats Caroline" address a person, they state nothing
                "Hey", "Hi", "Hello", "Congrats", "Congratulations", "Wow", "Woohoo", "Go", "Dear", "Bye"}

# A preference about the form of the work: "CSV with semicolon separators, not Excel", "I'd
# like a plain TSV file, no spreadsheets please", "dates in ISO format, always", "she
# prefers written updates over meetings".
_PREFERENCE = re.compile(
    r"\b(?:i|we)'d\s+(?:like|prefer|rather\s+have)\s+(?:a|an|the|it|them|all|every)\b[^.!?]{0,80}(?:,\s*(?:not|no)\s"
    r"|\bplease\b|\binstead\b)|\bno\s+[\w-]+(?:\s+[\w-]+)?\s+please\b|[,;]\s*(?:always|every\s+time)\s*[.!]?\s*$"
    r"|\bprefers?\s+[\w\s-]{1,40}?\s(?:over|to|instead\s+of|rather\s+than)\s"
    r"|(?-i:\b[A-Z]{2,}[A-Za-z0-9]*\b)[^.!?,]{0,60},\s*(?:not|no)\s+\w+[^.!?,]{0,20}[.!]?\s*$", _I)

_KIND_PATTERNS = ((INSTRUCTION, _INSTRUCTION), (DECISION, _DECISION), (ERROR, _ERROR),
                  (TODO, _TODO), (IDENTIFIER, _IDENTIFIER), (PATH, _PATH), (URL, _URL),
                  (QUANTITY, _QUANTITY))

# -- supersession keys -------------------------------------------------------------------
_SUBJECT = r"(?P<subj>[A-Za-z][\w .'/-]{1,60}?)"
_SET_TO = re.compile(
    r"\b(?:set|change|changed|update|updated|raise|raised|lower|lowered|bump|bumped|increase|increased"
    r"|decrease|decreased|move|moved|reduce|reduced|switch|switched|rename|renamed|point)\s+" + _SUBJECT
    + r"\s+(?:to|=|at)\s+(?P<val>.+)$", _I)
# The subject first: "the sync meeting moved to 4pm", "batch size stays at 100".
_MOVED_TO = re.compile(
    r"^(?:(?:ok|okay|so|also|note|fyi|update|correction|heads\s+up|actually)[,:]?\s+)?" + _SUBJECT +
    r"\s+(?:has\s+|was\s+|is\s+)?(?:moved|changed|switched|slipped|stays|stayed|remains)\s+(?:to|at)\s+"
    r"(?P<val>[^.;!?]{1,80}?)\s*[.;!?]?$", _I)
# "try a batch size of 250": a subject given a value inside a clause.
_OF_VALUE = re.compile(
    r"\b(?:try|use|with|want|need)\s+(?:a|an|the)\s+(?P<subj>[A-Za-z][\w -]{1,40}?)\s+of\s+"
    r"(?P<val>\d[\w.%-]*(?:\s?[A-Za-z]{1,8})?)(?:\s+instead)?\s*[.!;]?$", _I)
_USE_FOR = re.compile(
    r"\b(?:use|using|switch\s+to|switched\s+to|go\s+with|going\s+with|chose|choose|pick|picked|adopt)\s+"
    r"(?P<val>[\w .+#-]{1,40}?)\s+(?:for|as)\s+" + _SUBJECT + r"(?:\s+instead)?\s*[.!;]?$", _I)
_IS = re.compile(
    r"^(?:(?:ok|okay|so|also|note|fyi|update|correction|heads\s+up|actually)[,:]\s+)?" + _SUBJECT +
    r"\s+(?:is|are|was|will\s+be|should\s+be)\s+(?:now\s+|still\s+|actually\s+)?(?:set\s+to\s+|changed\s+to\s+|moved\s+to\s+)?"
    r"(?P<val>[^.;!?]{1,120}?)\s*[.;!?]?$", _I)
_ASSIGN = re.compile(r"^\s*(?P<subj>[A-Za-z][\w.-]{0,40}(?:\s+[\w.-]+){0,3})\s*(?:=|:)\s*(?P<val>\S.{0,160}?)\s*$")
# "Ben: release is Friday": who speaks, in a transcript or a chat log, is not the subject of
# what is said. A name of one or two capitalised words before a clause of 3+ words; a
# short value after the colon ("Broker: Kafka") is a label and value, kept.
_SPEAKER = re.compile(r"^(?!(?:Update|Note|Decision|Correction|Reminder|Important|Warning|Summary|Status|Todo"
                      r"|Heads|Fyi|Approved|Change)\b)[A-Z][a-z]+(?:\s[A-Z][a-z]+)?:\s+(?=\S+\s+\S+\s+\S)")
_LEADING_NOISE = re.compile(
    r"^(?:(?:ok|okay|so|also|note|fyi|update|correction|heads up|please|and|but|then|decision|"
    r"change of plan)[,:]?\s+)+", _I)
_ARTICLES = re.compile(r"^(?:the|a|an|our|my|your|their|its|this|that)\s+", _I)
_VAGUE_SUBJECTS = {"it", "this", "that", "there", "which", "what", "here", "he", "she", "they",
                   "we", "i", "you", "everything", "nothing", "something", "result", "output",
                   "answer", "reason", "problem", "issue", "question", "thing", "plan", "idea"}
_LABELS = {"decision", "note", "todo", "fixme", "error", "warning", "update", "summary", "info",
           "debug", "traceback", "example", "usage", "output", "result", "step", "question",
           "answer", "reason", "http", "https", "file", "line", "user", "assistant", "tool", "system"}
_MODALS = re.compile(
    r"\b(?:must(?:\s+not)?|never|always|shall(?:\s+not)?|do\s+not|don't|should(?:\s+not)?|shouldn't"
    r"|mustn't|please|you|we|to)\b", _I)
_REPLACES = re.compile(r"\binstead\s+of\s+(?P<old>[\w.:%$-]+(?:\s?[A-Za-z]{1,8}\b)?)", _I)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(\[])")
_TRACEBACK_START = re.compile(r"^\s*Traceback \(most recent call last\)")
_EXCEPTION_LINE = re.compile(r"^\s*[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning)\b")
# Python prints a traceback's frames indented ("  File ...", then the source line) and the
# exception itself at column 0, whatever its class is called (SerializationFailure,
# IntegrityViolation, a library's own names): the first unindented line ends the frames.
_UNINDENTED_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(?::\s|$)")


@dataclass(frozen=True)
class ExtractedFact:
    kind: str
    text: str
    key: str
    value: str
    source_seq: int
    replaces: str = ""   # the old value a correction names ("... instead of 30"): "30"


def normalize(text: str) -> str:
    """Lower case, single spaces, no surrounding punctuation: the comparison form."""
    text = re.sub(r"\s+", " ", text.strip().lower())
    return text.strip(" .,;:!?\"'`()[]")


def _normalize_subject(subject: str) -> str:
    subject = _LEADING_NOISE.sub("", subject.strip())
    subject = _ARTICLES.sub("", normalize(subject))
    return re.sub(r"^(?:new|current|default)\s+", "", subject)


def _normalize_value(value: str) -> str:
    value = normalize(value)
    # What only confirms or dates the value is not part of it: "Friday, as planned" restates
    # "Friday"; "60 seconds instead of 30" sets 60 seconds.
    value = re.sub(r",?\s+as\s+(?:planned|agreed|discussed|before|usual|expected)$", "", value)
    value = re.sub(r"\s+instead\s+of\s+.*$", "", value)
    value = re.sub(r"^(?:at|on)\s+", "", value)
    value = re.sub(r"\s+(?:instead|now|from now on|going forward)$", "", value)
    return value.strip(" .,;:!?")


def split_sentences(text: str) -> list[str]:
    """Lines, then sentences within a line. Paths and versions (x.y) do not end a sentence
    because a sentence break needs whitespace then a capital, digit or quote."""
    sentences: list[str] = []
    for line in text.splitlines():
        line = line.strip()
        if line:
            sentences.extend(s.strip() for s in _SENTENCE_END.split(line) if s.strip())
    return sentences


def supersession_key(sentence: str) -> tuple[str, str] | None:
    """(subject, value) when the sentence assigns a value to a subject, else None.

    >>> supersession_key("Set the request timeout to 45 s.")
    ('request timeout', '45 s')
    """
    s = _SPEAKER.sub("", sentence.strip())
    for pattern, prefix in ((_SET_TO, ""), (_USE_FOR, "use for "), (_MOVED_TO, ""), (_OF_VALUE, ""),
                            (_IS, ""), (_ASSIGN, "")):
        m = pattern.search(s)
        if not m:
            continue
        subject = _normalize_subject(m.group("subj"))
        value = _normalize_value(m.group("val"))
        words = subject.split()
        if (not subject or not value or len(words) > 6 or subject in _VAGUE_SUBJECTS
                or words[0] in _VAGUE_SUBJECTS or subject in _LABELS):
            continue
        if pattern is _ASSIGN and ("://" in s or len(value.split()) > 12):
            continue  # "https://..." or a long "Label: prose" line is not an assignment
        return prefix + subject, value
    return None


def _rule_key(sentence: str) -> str:
    """A rule's key is its action without the modal words, so "always X" and "never X"
    share a key (the later one supersedes) while their values stay different."""
    return "rule:" + re.sub(r"\s+", " ", _MODALS.sub(" ", normalize(_SPEAKER.sub("", sentence)))).strip()


# Why something broke: a causal link and either a failure or a technical value. "Because"
# alone is chat ("I love camping 'cause nature brings peace"); with "rejected" or
# "moment.js" it explains an error the agent must not rediscover.
_CAUSE = re.compile(
    r"\b(?:root\s+cause|caused\s+by|because|due\s+to|the\s+reason\s+(?:is|was)|that's\s+why|which\s+is\s+why"
    r"|comes?\s+from|pulled\s+in\s+by|turned\s+out|traced\s+(?:it\s+)?to)\b|,\s+so\s+", _I)
_FAILURE = re.compile(
    r"\b(?:fail\w*|error\w*|reject\w*|refus\w*|broke|broken|crash\w*|skips?|skipped|missing|wrong|off\s+by"
    r"|mismatch\w*|never\s+(?:created|set|ran|run|deployed|applied|migrated)|timed?\s*out|timeouts?|stale|leak\w*"
    r"|bug|slow\w*|tail|spike\w*|queue\w*|denied|instead\s+of|read-only|without\s+an?)\b", _I)
_TECHNICAL_VALUES = frozenset({"code", "url", "path", "host", "id", "version", "token", "command", "exception"})


# A cause stated to justify a rule is the rule: "... get rejected by the hook, so run it first".
_CAUSE_OF_A_RULE = re.compile(
    r",\s+so\s+(?:please\s+)?(?:just\s+)?(?:run|leave|use|don't|do|make|keep|check|skip|avoid|never|always|ask|wait"
    r"|stay|be|set|read|remember|let|go|stick|only)\b|^\s*(?:reminder|remember|note|important|fyi)\b"
    r"|\bleave\s+\w+(?:\s+\w+){0,3}\s+alone\b", _I)


def _is_root_cause(sentence: str) -> bool:
    if not _CAUSE.search(sentence) or _CAUSE_OF_A_RULE.search(sentence):
        return False
    return bool(_FAILURE.search(sentence)) or bool(_TECHNICAL_VALUES & set(salience.score(sentence).values))


def classify(sentence: str, role: str = "user") -> str | None:
    """The most important kind the sentence matches, or None for no fact. What no kind
    pattern recognises may still be a fact in other words: app.context.salience decides."""
    if not salience.is_question(sentence):
        if _DEADLINE.search(sentence) and not _DECLARATIVE_START.search(sentence) \
                and not _NOT_INSTRUCTION.search(sentence):
            return TODO  # "send it to finance by end of day Thursday": a task with its deadline
        if _is_root_cause(sentence) and not _ERROR.search(sentence):
            return ERROR
    asked = salience.is_question(sentence)
    if role == "tool" and _ERROR.search(sentence):
        return ERROR   # a tool states no rules: "pods is forbidden" in its output is a failure
    for kind, pattern in _KIND_PATTERNS:
        if pattern.search(sentence):
            if kind == INSTRUCTION and _NOT_INSTRUCTION.search(sentence):
                continue
            if kind == DECISION and asked:
                continue   # "how's it going with X?" decides nothing
            return kind
    if salience.is_question(sentence):
        return None  # "could we move the retro to 3pm?" sets nothing
    if _DIRECTIVE.search(sentence) and not _NOT_INSTRUCTION.search(sentence):
        return INSTRUCTION  # "then skip the ACL step entirely"
    if _PREFERENCE.search(sentence):
        return INSTRUCTION  # "a plain TSV file, no spreadsheets please": how the user wants it done
    if _NUMERIC_SETTING.search(sentence):
        return QUANTITY  # a number without a unit, but explicitly assigned: a setting
    if re.match(_CLAUSE + r"(?:set|change|switch|move|rename|point|raise|lower|bump)\s", sentence, _I) \
            and _SET_TO.search(sentence):
        return INSTRUCTION  # "switch the log level to info": a setting the user asks for
    assignment = supersession_key(sentence)
    if assignment is not None and re.search(r"\b(?:should|must)\s+be\b", sentence, _I):
        return INSTRUCTION  # "the log level should be debug"
    if assignment is not None and re.search(r"\d", assignment[1]):
        return QUANTITY  # "the region is us-east-1": a subject given a coded value
    salient = salience.score(sentence, role)
    if salient.is_fact:
        return _salient_kind(salient)
    if role in ("user", "system") and salient.is_rule and not _NOT_INSTRUCTION.search(sentence):
        return INSTRUCTION  # "nobody touches the schema without a second reviewer": a rule needs no value
    if _RELATIVE_DATE.search(sentence) and not salience.is_hedged(sentence):
        return QUANTITY  # dates count as quantities (see _QUANTITY)
    if role != "tool" and _FIRST_PERSON_EVENT.search(sentence):
        return ENTITY  # what happened to someone: the least binding kind
    if role != "tool" and _PERSONAL_PREFERENCE.search(sentence):
        return ENTITY  # what someone likes: as little binding as what happened to them
    if role != "tool" and _named_entities(sentence):
        return ENTITY  # not in tool output: logs and bots capitalise labels, not names
    return None


# What a salient sentence is, from what made it salient: binding words first (they are
# why it must not be forgotten), then the sort of its strongest value.
_COMMITMENT_KIND = {"obligation": INSTRUCTION, "condition": INSTRUCTION, "prohibition": INSTRUCTION,
                    "every": INSTRUCTION, "preference": INSTRUCTION, "decision": DECISION,
                    "limit": QUANTITY}
_VALUE_KIND = {"exception": ERROR, "path": PATH, "url": URL, "amount": QUANTITY, "time": QUANTITY, "date": QUANTITY,
               "number": QUANTITY}


def _salient_kind(salient: salience.Salience) -> str:
    for commitment in salient.commitments:
        if commitment in _COMMITMENT_KIND:
            return _COMMITMENT_KIND[commitment]
    strongest = salient.values[0]
    if strongest in ("name", "acronym", "quoted"):
        return ENTITY
    return _VALUE_KIND.get(strongest, IDENTIFIER)


def _named_entities(sentence: str) -> list[str]:
    found = []
    for m in _ENTITY.finditer(sentence):
        words = m.group(0).split()
        while words and words[0] in _ENTITY_STOP:
            words.pop(0)
        if len(words) >= 2:
            found.append(" ".join(words))
    return found


def _clip(sentence: str, kind: str) -> str:
    """Keep the fact within MAX_FACT_CHARS, centred on the match so the value survives."""
    if len(sentence) <= MAX_FACT_CHARS:
        return sentence
    pattern = dict(_KIND_PATTERNS).get(kind)
    m = pattern.search(sentence) if pattern else None
    centre = (m.start() + m.end()) // 2 if m else 0
    start = max(0, min(centre - MAX_FACT_CHARS // 2, len(sentence) - MAX_FACT_CHARS))
    end = start + MAX_FACT_CHARS
    # whole words at both cuts: half a word ("ad failed") reads as another word
    if start > 0 and not sentence[start - 1].isspace():
        space = sentence.find(" ", start, start + _WORD_SNAP)
        start = space + 1 if space >= 0 else start
    if end < len(sentence) and not sentence[end].isspace():
        space = sentence.rfind(" ", end - _WORD_SNAP, end)
        end = space if space > start else end
    return sentence[start:end].strip()


_WORD_SNAP = 30   # how far a cut moves to a space; a longer "word" (a hash, a URL) is cut


# A "sentence" longer than this is a log line, a minified blob or a run with no sentence
# boundary at all (an agent may send 100k characters of "1,1,1,"). It is classified in
# segments of at most this many characters, so every pattern and the salience score look
# at a bounded text whatever a pattern costs per character: the work on a message is at
# most (its length / MAX_UNIT_CHARS) bounded units. A fact keeps MAX_FACT_CHARS of its
# sentence anyway, and prose sentences are far shorter.
MAX_UNIT_CHARS = 1_000


def segments(sentence: str, limit: int = MAX_UNIT_CHARS) -> list[str]:
    """``sentence`` in pieces of at most ``limit`` characters, cut at the last space of
    the second half of each window where there is one (so words stay whole), else hard."""
    pieces: list[str] = []
    rest = sentence
    while len(rest) > limit:
        cut = rest.rfind(" ", limit // 2, limit + 1)
        cut = cut if cut > 0 else limit
        pieces.append(rest[:cut].strip())
        rest = rest[cut:].lstrip()
    pieces.append(rest)
    return [p for p in pieces if p]


def fact_units(content: str) -> list[str]:
    """Sentences to classify, each at most MAX_UNIT_CHARS (see ``segments``). A Python
    traceback collapses to its exception line: the frames are paths and line numbers that
    would flood the warm tier with noise."""
    return [unit for unit, _ in _units(content)]


def _units(content: str) -> list[tuple[str, bool]]:
    """fact_units, each with whether it is a traceback's exception line (an error, whatever
    its words)."""
    units: list[tuple[str, bool]] = []
    in_traceback = False
    for line in content.splitlines():
        if _TRACEBACK_START.match(line):
            in_traceback = True
            continue
        if in_traceback:
            if _EXCEPTION_LINE.match(line) or _UNINDENTED_EXCEPTION.match(line):
                units.extend((piece, True) for piece in segments(line.strip()))
                in_traceback = False
                continue
            if not line.strip() or line[0].isspace():
                continue   # a frame, or its source line
            in_traceback = False   # output after a traceback cut short: read as usual
        for sentence in split_sentences(line):
            units.extend((piece, False) for piece in segments(sentence))
    return units


# Tool output is bulk: a directory listing is 14 paths, a log is 10 "processed N items"
# lines. Those are enumerations, not 14 key facts; keeping them all would flood the warm
# tier and push the user's instructions out of the view. The most important few survive
# (errors first); the full output stays in the cold tier, searchable.
MAX_FACTS_PER_TOOL_MESSAGE = 3


def extract_facts(content: str, source_seq: int, role: str = "user") -> list[ExtractedFact]:
    """Key facts of one message, in order of appearance, without duplicates; for a tool
    message, only its MAX_FACTS_PER_TOOL_MESSAGE most important ones."""
    facts = _extract_all(content, source_seq, role)
    if role == "tool" and len(facts) > MAX_FACTS_PER_TOOL_MESSAGE:
        ranked = sorted(range(len(facts)), key=lambda i: (KIND_PRIORITY[facts[i].kind], i))
        keep = set(ranked[:MAX_FACTS_PER_TOOL_MESSAGE])
        facts = [f for i, f in enumerate(facts) if i in keep]
    return facts


def fact_shape(kind: str, text: str) -> str:
    """What makes two facts "the same sort of line": errors group by exception class or
    HTTP status, everything else by its text with numbers and hex ids masked. Used by the
    view to show one fact per shape before it shows a second of any shape."""
    if kind == ERROR:
        m = re.search(r"\b([A-Za-z_][\w.]*(?:Error|Exception))\b", text)
        if m:
            return "error:" + m.group(1).lower()
        m = re.search(r"\b(?:HTTP|status)\D{0,12}([45])\d\d\b", text, _I)
        if m:
            return f"error:http {m.group(1)}xx"
    masked = re.sub(r"\b(?=[0-9a-f]*\d)[0-9a-f]{6,}\b|\d+", "#", text.lower())
    return f"{kind}:" + re.sub(r"\s+", " ", masked).strip()


def _extract_all(content: str, source_seq: int, role: str) -> list[ExtractedFact]:
    facts: list[ExtractedFact] = []
    seen: set[str] = set()
    for sentence, raised in _units(content):
        kind = ERROR if raised else classify(sentence, role)
        if kind is None:
            continue
        text = _clip(sentence, kind)
        # Errors are occurrences, not settings: "ValueError: x" then "ValueError: y" are two
        # errors, so they never get an assignment key that would let one supersede the other.
        assignment = None if kind == ERROR else supersession_key(sentence)
        if assignment is not None:
            key, value = assignment
        elif kind == INSTRUCTION:
            key, value = _rule_key(sentence), normalize(sentence)
        else:
            key = value = f"{kind}:{normalize(_SPEAKER.sub('', sentence))}"
        if key in seen and any(f.key == key and f.value == value for f in facts):
            continue
        seen.add(key)
        replaced = _REPLACES.search(sentence)
        facts.append(ExtractedFact(kind=kind, text=text, key=key, value=value, source_seq=source_seq,
                                   replaces=normalize(replaced.group("old")) if replaced else ""))
    return facts
