using System.Collections.Immutable;
using System.Diagnostics;

namespace Bookstore.Buyer;

/// <summary>
/// BookBuyer ([Phoenix/App §5.5]), the external client: the paper's four operations in a loop, (i) search "recovery"
/// (PriceGrabber), (ii) add one book from each store (BookSeller, which reserves it at the store), (iii) show the basket
/// with tax (BookSeller, which asks TaxCalculator), (iv) empty the basket (BookSeller, which returns every book to its
/// store). It remembers what it was told, so that the launcher can reconcile the services' state with it.
/// </summary>
internal sealed class BookBuyer(SessionClient priceGrabber, SessionClient seller, IReadOnlyList<string> stores, string region = "WA")
{
    public const string Keyword = "recovery";

    private readonly List<BasketItem> _basket = [];
    private readonly Dictionary<(string Store, string BookId), int> _sold = [];
    private readonly Dictionary<(string Store, string BookId), int> _returned = [];
    private readonly Dictionary<string, int> _storeCalls = [];

    /// <summary>Loops finished.</summary>
    public int Loops { get; private set; }

    /// <summary>Persistent requests acknowledged by BookSeller (adds and empties).</summary>
    public int SellerRequests { get; private set; }

    /// <summary>Differences between what BookSeller showed and what the buyer was told before (should stay 0).</summary>
    public int Surprises { get; private set; }

    /// <summary>The basket as the buyer was told it is.</summary>
    public IReadOnlyList<BasketItem> Basket => _basket;

    /// <summary>Books the buyer was told were reserved (sold to the basket), by store and book.</summary>
    public IReadOnlyDictionary<(string Store, string BookId), int> Sold => _sold;

    /// <summary>Books the buyer was told went back to their store, by store and book.</summary>
    public IReadOnlyDictionary<(string Store, string BookId), int> Returned => _returned;

    /// <summary>Reserve and release calls BookSeller made to each store for acknowledged requests.</summary>
    public IReadOnlyDictionary<string, int> StoreCalls => _storeCalls;

    public int Retries => priceGrabber.Retries + seller.Retries;

    /// <summary>The builds whose replies the buyer got (<see cref="AddResult.Build"/>: 1 when the field is absent).</summary>
    public SortedSet<int> BuildsSeen { get; } = [];

    public async Task StartAsync(CancellationToken cancellationToken)
    {
        await priceGrabber.StartAsync(cancellationToken);
        await seller.StartAsync(cancellationToken);
    }

    /// <summary>One loop of the four operations; <paramref name="report"/> hears each step as it ends.</summary>
    public async Task RunLoopAsync(Action<BuyerStep> report, CancellationToken cancellationToken)
    {
        var loop = Loops + 1;
        var clock = Stopwatch.StartNew();

        // (i) search
        var found = await priceGrabber.PostAsync<SearchResult>("/search", new SearchRequest(Keyword), cancellationToken);
        report(new BuyerStep(loop, "search", $"\"{Keyword}\": {found.Offers.Length} offers from {found.Offers.Select(o => o.Store).Distinct().Count()} stores", clock.Elapsed));

        // (ii) one book from each store: a different one each loop, among those in stock
        clock.Restart();
        var added = new List<string>();
        foreach (var store in stores)
        {
            var offers = found.Offers.Where(o => o.Store == store && o.InStock > 0).ToList();
            if (offers.Count == 0)
            {
                continue;
            }

            var pick = offers[(loop - 1) % offers.Count];
            var result = await seller.PostAsync<AddResult>("/basket/add", new AddToBasket(store, pick.BookId), cancellationToken);
            SellerRequests++;
            BuildsSeen.Add(result.Build ?? 1);
            Count(_storeCalls, store);
            if (result is { Added: true, Item: { } item })
            {
                _basket.Add(item);
                Count(_sold, (item.Store, item.BookId));
                added.Add($"{store}/{item.BookId}");
            }

            if (result.Count != _basket.Count)
            {
                Surprises++;
            }
        }

        report(new BuyerStep(loop, "add", $"{added.Count} books: {string.Join(", ", added)}", clock.Elapsed));

        // (iii) show the basket with tax
        clock.Restart();
        var view = await seller.PostAsync<BasketView>("/basket/show", new ShowBasket(region), cancellationToken);
        if (!view.Items.SequenceEqual(_basket))
        {
            Surprises++;
        }

        report(new BuyerStep(loop, "show", $"{view.Items.Count} books {view.Subtotal:0.00} + tax {view.Tax:0.00} ({region} {view.TaxRate:0.###%}) = {view.Total:0.00}", clock.Elapsed));

        // (iv) empty the basket: every book goes back to its store
        clock.Restart();
        var emptied = await seller.PostAsync<EmptyResult>("/basket/empty", null, cancellationToken);
        SellerRequests++;
        if (!emptied.Removed.SequenceEqual(_basket))
        {
            Surprises++;
        }

        foreach (var item in emptied.Removed)
        {
            Count(_returned, (item.Store, item.BookId));
            Count(_storeCalls, item.Store);
        }

        _basket.Clear();
        report(new BuyerStep(loop, "empty", $"{emptied.Removed.Count} books back to their stores", clock.Elapsed));
        Loops = loop;
    }

    /// <summary>BookSeller's basket as it holds it now (a read-only request of the buyer's session).</summary>
    public Task<ImmutableList<BasketItem>> ReadBasketAsync(CancellationToken cancellationToken)
        => seller.GetAsync<ImmutableList<BasketItem>>("/basket", cancellationToken);

    private static void Count<TKey>(Dictionary<TKey, int> counts, TKey key)
        where TKey : notnull
        => counts[key] = counts.GetValueOrDefault(key) + 1;
}

/// <summary>One finished step of a loop, for the display.</summary>
internal sealed record BuyerStep(int Loop, string Operation, string Text, TimeSpan Elapsed);
