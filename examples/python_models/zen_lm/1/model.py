# zen_lm: text in, text out, word by word (decoupled). Not a language model: a bigram chain over the
# Zen of Python, which the standard library ships (`import this`), so it builds and runs offline.
#
# Each word of the Zen knows the words that follow it there (and which words end an aphorism). A
# generation starts after the last word of the prompt that the Zen knows ("Tell me about errors" ->
# " should never pass silently."), else at the start of an aphorism, and walks the chain: each step picks
# one of the current word's followers with a small linear congruential generator seeded from the prompt
# (or the request's "seed"), so the same prompt always gets the same text. It ends at the end of an
# aphorism (finish_reason "stop"; "ignore_eos" goes on into another one) or after max_tokens words
# ("length"). "temperature" and the other sampling parameters are accepted and ignored.
import asyncio
import codecs
import contextlib
import io
import json
import zlib

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
DEFAULT_MAX_TOKENS = 64
END = None  # the follower that ends an aphorism


def zen_lines():
    """The 19 aphorisms of PEP 20, as `import this` prints them (without printing them)."""
    with contextlib.redirect_stdout(io.StringIO()):
        import this
    text = codecs.decode(this.s, "rot13")
    return [line for line in text.splitlines()[1:] if line.strip()]


def key(word):
    return word.lower().strip(".,!*-?:;\"'()")


class ZenChain:
    """The bigram chain and the walk over it (pure: no Triton types)."""

    def __init__(self, lines):
        self.lines = [line.split() for line in lines]
        #: the last words of aphorisms, as written ("ugly."): only after one of these may a generation end
        self.ends = {words[-1] for words in self.lines}
        self.followers = {}
        for words in self.lines:
            for i, w in enumerate(words):
                nxt = words[i + 1] if i + 1 < len(words) else END
                self.followers.setdefault(key(w), []).append(nxt)

    @staticmethod
    def seed_of(prompt, seed=None):
        return (
            zlib.crc32(prompt.encode("utf-8", "surrogatepass")) if seed is None else int(seed)
        ) & 0x7FFFFFFF

    def words(self, prompt, max_tokens=DEFAULT_MAX_TOKENS, seed=None, ignore_eos=False):
        """Yields the text of each generated word (with its leading space or newline), then returns the
        finish reason ("stop" or "length")."""
        rng = self.seed_of(prompt, seed)

        def draw(n):
            nonlocal rng
            rng = (rng * 1103515245 + 12345) & 0x7FFFFFFF
            return (rng >> 8) % n

        # the word the text goes on from (None: start an aphorism)
        current = next((w for w in reversed(prompt.split()) if key(w) in self.followers), None)
        produced = 0
        while produced < max_tokens:
            if produced and current in self.ends:  # "it." ends an aphorism ("it" goes on)
                options = [END]
            else:
                options = [] if current is None else self.followers[key(current)]
                options = [w for w in options if w is not END]
            if not options:
                word = self.lines[draw(len(self.lines))][0]
                text = word if produced == 0 else "\n" + word
            else:
                word = options[draw(len(options))]
                if word is END:
                    if not ignore_eos:
                        return "stop"
                    current = None
                    continue
                text = " " + word
            yield text
            produced += 1
            current = word
        return "length"


class TritonPythonModel:
    def initialize(self, args):
        self.chain = ZenChain(zen_lines())
        # the family must live as long as its metrics (as in Triton's Python backend)
        self.family = pb_utils.MetricFamily(
            name="zen_lm_cancelled_total",
            description="Generations zen_lm stopped because the client went away",
            kind=pb_utils.MetricFamily.COUNTER,
        )
        self.cancelled = self.family.Metric(labels={})

    async def execute(self, requests):
        # an async execute: the instance's generations overlap (each awaits between words)
        await asyncio.gather(*(self.generate(r) for r in requests))
        return None

    async def generate(self, request):
        sender = request.get_response_sender()
        try:
            prompt, options = self.read(request)
        except ValueError as e:
            error = pb_utils.TritonError(str(e), pb_utils.TritonError.INVALID_ARG)
            sender.send(pb_utils.InferenceResponse(error=error), flags=FINAL)
            return
        delay = options.pop("delay_ms") / 1000.0
        prompt_tokens = len(prompt.split())
        words = self.chain.words(prompt, **options)
        produced = 0
        pending = None  # each word is sent when the next is known, so the last carries the final flag
        while True:
            try:
                text = next(words)
            except StopIteration as stop:
                finish = stop.value
                break
            if request.is_cancelled():
                self.cancelled.increment(1)
                sender.send(flags=FINAL)
                return
            if pending is not None:
                sender.send(self.response(pending, prompt_tokens, produced))
                if delay:
                    await asyncio.sleep(delay)
            produced += 1
            pending = text
        sender.send(self.response(pending or "", prompt_tokens, produced, finish), flags=FINAL)

    @staticmethod
    def read(request):
        rows = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy().reshape(-1)
        try:
            prompt = b"".join(r if isinstance(r, bytes) else str(r).encode() for r in rows).decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"text_input must be UTF-8: {e}") from None
        params = json.loads(request.parameters() or "{}")
        options = {"delay_ms": 0.0}
        for name, kind in (("max_tokens", int), ("seed", int), ("ignore_eos", bool), ("delay_ms", float)):
            value = params.get(name)
            if value is None:
                continue
            if isinstance(value, bool) != (kind is bool) or not isinstance(value, (int, float)):
                raise ValueError(f"parameter '{name}' must be {'a boolean' if kind is bool else 'a number'}")
            if name in ("max_tokens", "delay_ms") and value < 0:
                raise ValueError(f"parameter '{name}' must not be negative")
            options[name] = kind(value)
        return prompt, options

    @staticmethod
    def response(text, prompt_tokens, completion_tokens, finish=None):
        outputs = [
            pb_utils.Tensor("text_output", np.array([text.encode()], dtype=np.object_)),
            pb_utils.Tensor("prompt_tokens", np.array([prompt_tokens], dtype=np.int32)),
            pb_utils.Tensor("completion_tokens", np.array([completion_tokens], dtype=np.int32)),
        ]
        if finish is not None:
            outputs.append(pb_utils.Tensor("finish_reason", np.array([finish.encode()], dtype=np.object_)))
        return pb_utils.InferenceResponse(output_tensors=outputs)
