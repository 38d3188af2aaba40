"""The lab's NRI runtime: the runtime side of NRI, for the lab and for tests.

Written independently of ``dmn.agent.nri`` (own framing in :mod:`.wire`, threads instead of
asyncio, hand-encoded ttrpc envelopes) so the two implementations check each other.
"""
