"""A monotonic clock the test moves by hand (``clock.now += 20``)."""


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now
