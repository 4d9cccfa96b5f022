using System.Collections.Immutable;

namespace Bookstore;

// The messages between the bookstore's components (JSON, camelCase on the wire).

/// <summary>A keyword search (PriceGrabber and each Bookstore).</summary>
internal sealed record SearchRequest(string Keyword);

/// <summary>A book a store offers.</summary>
internal sealed record Offer(string Store, string BookId, string Title, decimal Price, int InStock);

/// <summary>Offers, cheapest first.</summary>
internal sealed record SearchResult(ImmutableArray<Offer> Offers);

/// <summary>A book of one store (reserve, release).</summary>
internal sealed record BookRef(string BookId);

/// <summary>A store's answer to a reservation: the book leaves its stock (sold to the basket) when <c>Reserved</c>.</summary>
internal sealed record ReserveResult(bool Reserved, string BookId, string Title, decimal Price, int InStock);

/// <summary>A store's answer to a release: the book is back in stock.</summary>
internal sealed record ReleaseResult(bool Released, string BookId, int InStock);

/// <summary>The buyer adds one book of one store to the basket.</summary>
internal sealed record AddToBasket(string Store, string BookId);

/// <summary>A line of the basket.</summary>
internal sealed record BasketItem(string Store, string BookId, string Title, decimal Price);

/// <summary>
/// BookSeller's answer to an add: the item when the store had it. <paramref name="Build"/> is the field the upgraded
/// build adds (<c>--upgrade</c>, <see cref="Services.ComponentSettings.Build"/>); the first build leaves it out of the JSON.
/// </summary>
internal sealed record AddResult(bool Added, BasketItem? Item, int Count,
    [property: System.Text.Json.Serialization.JsonIgnore(Condition = System.Text.Json.Serialization.JsonIgnoreCondition.WhenWritingNull)] int? Build = null);

/// <summary>Show the basket with the tax of a region.</summary>
internal sealed record ShowBasket(string Region);

/// <summary>The basket, its subtotal, tax and total.</summary>
internal sealed record BasketView(ImmutableList<BasketItem> Items, decimal Subtotal, decimal TaxRate, decimal Tax, decimal Total);

/// <summary>BookSeller's answer to emptying the basket: what went back to the stores.</summary>
internal sealed record EmptyResult(ImmutableList<BasketItem> Removed);

/// <summary>TaxCalculator's question and answer.</summary>
internal sealed record TaxRequest(string Region, decimal Amount);

/// <summary>The tax of an amount in a region.</summary>
internal sealed record TaxResult(string Region, decimal Rate, decimal Tax);

/// <summary>One book's stock at a store: what it started with, what is on the shelf, sold (reserved) and returned (released).</summary>
internal sealed record StockLine(string BookId, string Title, int Initial, int InStock, int Sold, int Returned);

/// <summary>How many persistent requests a service executed, and how many of them repeated a number already executed in their session.</summary>
internal sealed record LedgerTotals(long Executions, long Duplicates);

/// <summary>A store's whole inventory and its execution ledger (the crash test reconciles against it).</summary>
internal sealed record InventoryView(string Store, ImmutableArray<StockLine> Books, LedgerTotals Ledger);

/// <summary>A service's log forces (by reason) and physical commits since it started.</summary>
internal sealed record ForceCounts(string Service, ImmutableSortedDictionary<string, long> Forces, long TotalForces, long Commits);
