using System.Collections.Immutable;
using PersistentServices;

namespace Bookstore.Services;

/// <summary>
/// A Bookstore ([Phoenix/App §5.5]): persistent, its inventory keyed shared state (one shared variable per book, value
/// logged, recovered without replaying its callers' sessions). Search is a read-only method when roles are on.
/// </summary>
internal static class BookstoreEndpoints
{
    public static void Map(WebApplication app, string store, bool useRoles)
    {
        var catalog = Catalog.For(store);
        var inventory = new SharedMap<string, Stock?>("Bookstore.Inventory");
        var ledger = new ExecutionLedger("Bookstore.Executions");

        // [Phoenix/App §3.3] a read-only method: not logged, forces nothing, its caller need not force either.
        if (useRoles)
        {
            app.MapPost("/search", [PersistentReadOnly] (SearchRequest query) => Search(catalog, inventory, query));
        }
        else
        {
            app.MapPost("/search", [Persistent] (SearchRequest query) => Search(catalog, inventory, query));
        }

        // A book leaves the shelf for a basket (sold), or comes back (returned). Each runs once per call, whatever crashes.
        app.MapPost("/reserve", [Persistent] (BookRef book, HttpContext context) =>
        {
            if (!catalog.Books.TryGetValue(book.BookId, out var entry))
            {
                return Results.NotFound();
            }

            ledger.Record(context);
            var reserved = false;
            var stock = inventory.Update(book.BookId, s =>
            {
                var current = s ?? Stock.Initial;
                reserved = current.InStock > 0;
                return reserved ? current with { InStock = current.InStock - 1, Sold = current.Sold + 1 } : current;
            })!;
            return Results.Ok(new ReserveResult(reserved, book.BookId, entry.Title, entry.Price, stock.InStock));
        });

        app.MapPost("/release", [Persistent] (BookRef book, HttpContext context) =>
        {
            if (!catalog.Books.ContainsKey(book.BookId))
            {
                return Results.NotFound();
            }

            ledger.Record(context);
            var stock = inventory.Update(book.BookId, s =>
            {
                var current = s ?? Stock.Initial;
                return current with { InStock = current.InStock + 1, Returned = current.Returned + 1 };
            })!;
            return Results.Ok(new ReleaseResult(true, book.BookId, stock.InStock));
        });

        // The whole inventory and the ledger, for the launcher's reconciliation. Not logged.
        app.MapGet("/inventory", [PersistentReadOnly] () => Results.Ok(new InventoryView(
            store,
            [.. catalog.BookIds.Select(id =>
            {
                var stock = inventory.Get(id) ?? Stock.Initial;
                return new StockLine(id, catalog.Books[id].Title, Catalog.InitialStock, stock.InStock, stock.Sold, stock.Returned);
            })],
            ledger.Read())));
    }

    private static SearchResult Search(Catalog catalog, SharedMap<string, Stock?> inventory, SearchRequest query)
        => new([.. catalog.BookIds
            .Where(id => catalog.Books[id].Title.Contains(query.Keyword, StringComparison.OrdinalIgnoreCase))
            .Select(id => new Offer(catalog.Store, id, catalog.Books[id].Title, catalog.Books[id].Price, (inventory.Get(id) ?? Stock.Initial).InStock))
            .OrderBy(o => o.Price)
            .ThenBy(o => o.BookId, StringComparer.Ordinal)]);
}

/// <summary>One book's stock at a store (immutable: a shared value is replaced, never changed in place).</summary>
internal sealed record Stock(int InStock, int Sold, int Returned)
{
    public static readonly Stock Initial = new(Catalog.InitialStock, 0, 0);
}
