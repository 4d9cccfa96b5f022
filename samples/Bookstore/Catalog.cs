using System.Collections.Frozen;

namespace Bookstore;

/// <summary>
/// What each store sells: the same twelve titles everywhere, priced a little differently per store (so the buyer's
/// choices differ by store), each starting with <see cref="InitialStock"/> copies. Fixed in code: a store's inventory
/// starts from it and changes only through logged requests.
/// </summary>
internal sealed class Catalog
{
    public const int InitialStock = 100;

    private static readonly (string Title, decimal Price)[] Titles =
    [
        ("Transaction Processing: Concepts and Techniques", 89.00m),
        ("Recovery Mechanisms in Database Systems", 54.50m),
        ("Crash Recovery for Persistent Components", 39.90m),
        ("Log-Based Recovery for Middleware Servers", 44.00m),
        ("The Art of Computer Programming, Volume 1", 79.99m),
        ("Disaster Recovery Planning", 29.95m),
        ("Designing Data-Intensive Applications", 42.00m),
        ("Principles of Transaction Processing", 64.25m),
        ("Exactly Once: Recovery Guarantees in Practice", 35.00m),
        ("Recovery in Parallel Database Systems", 58.75m),
        ("Distributed Systems: Concepts and Design", 71.10m),
        ("Fault Tolerance and Recovery Handbook", 47.30m),
    ];

    private Catalog(string store, FrozenDictionary<string, (string Title, decimal Price)> books)
    {
        Store = store;
        Books = books;
    }

    public string Store { get; }

    /// <summary>Book id (b01 … b12) → title and price at this store.</summary>
    public FrozenDictionary<string, (string Title, decimal Price)> Books { get; }

    /// <summary>The book ids in catalogue order.</summary>
    public IEnumerable<string> BookIds => Books.Keys.Order(StringComparer.Ordinal);

    /// <summary>The catalogue of the store named <paramref name="store"/> (its prices depend on its name, deterministically).</summary>
    public static Catalog For(string store)
    {
        // Up to ±12% by store, the same on every start: a stable hash of the name, not string.GetHashCode().
        var hash = 2166136261u; // FNV-1a
        foreach (var c in store)
        {
            hash = (hash ^ c) * 16777619u;
        }

        var spread = (int)(hash % 25) - 12;
        var books = Titles.Select((t, i) => (Id: $"b{i + 1:00}", t.Title, Price: decimal.Round(t.Price * (100 + spread) / 100m, 2)))
            .ToFrozenDictionary(b => b.Id, b => (b.Title, b.Price), StringComparer.Ordinal);
        return new Catalog(store, books);
    }
}
