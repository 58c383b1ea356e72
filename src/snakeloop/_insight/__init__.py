"""The parts of ``snakeloop.insight``: the task graph and its reports.

``model`` holds the snapshot's data classes; ``frames`` reads await chains and
stacks; ``edges`` reads who awaits a future from its done callbacks;
``primitives`` names the asyncio primitive a future belongs to; ``loopstate``
reads the loop line; ``build`` assembles the graph; ``render`` writes it out.
Nothing here runs unless a report is asked for.
"""
