"""The tools of the example evaluation suite: a small bookshop's customers, orders and stock.

Each call waits a little, as a real service would, so that concurrent steps show in the report's
parallelism column.
"""

from __future__ import annotations

import asyncio

from planexec import ToolError, tool

_CUSTOMERS = {"ada": "c-1", "bob": "c-2"}
_ORDERS = {
    "c-1": [{"id": "o-1", "total": 30.0}, {"id": "o-2", "total": 12.0}],
    "c-2": [{"id": "o-3", "total": 15.5}],
}
_LATENCY = 0.02


@tool
async def find_customer(name: str) -> str:
    """Look a customer's id up by name.

    Args:
        name: the customer's first name
    """
    await asyncio.sleep(_LATENCY)
    try:
        return _CUSTOMERS[name.lower()]
    except KeyError:
        raise ToolError(f"no customer called {name!r}") from None


@tool
async def orders_of(customer: str) -> list[dict[str, str | float]]:
    """A customer's orders, each with its id and total in euros.

    Args:
        customer: the customer's id, e.g. c-1
    """
    await asyncio.sleep(_LATENCY)
    return list(_ORDERS.get(customer, []))


@tool
def total(orders: list[dict[str, str | float]]) -> float:
    """Add up the totals of some orders.

    Args:
        orders: orders as orders_of returns them
    """
    return round(sum(float(o["total"]) for o in orders), 2)


@tool
async def stock(sku: str) -> int:
    """Copies of a book in the warehouse (the warehouse service is down today).

    Args:
        sku: the book's stock-keeping unit, e.g. B-12
    """
    await asyncio.sleep(_LATENCY)
    raise ToolError("the warehouse service is down")


@tool
async def archived_stock(sku: str) -> int:
    """Copies of a book, from last night's stock archive.

    Args:
        sku: the book's stock-keeping unit, e.g. B-12
    """
    await asyncio.sleep(_LATENCY)
    return 7 if sku == "B-12" else 0


TOOLS = [find_customer, orders_of, total, stock, archived_stock]
