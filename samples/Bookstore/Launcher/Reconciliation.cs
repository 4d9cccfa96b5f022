using System.Net.Http.Json;
using System.Text.Json;
using Bookstore.Buyer;

namespace Bookstore.Launcher;

/// <summary>
/// Checks the services' state against what the buyer was told, from the client side: BookSeller's basket equals the
/// buyer's; at every store, for every book, the books sold, returned and on the shelf changed by exactly what the buyer
/// was told; every store executed exactly the calls of the requests the buyer got replies for, and BookSeller exactly
/// those requests (each store's and BookSeller's execution ledger); no ledger saw a request executed twice.
/// </summary>
internal sealed class Reconciliation
{
    private static readonly JsonSerializerOptions Json = new(JsonSerializerDefaults.Web);

    private Reconciliation(IReadOnlyDictionary<string, InventoryView> stores, LedgerTotals seller)
    {
        Stores = stores;
        Seller = seller;
    }

    public IReadOnlyDictionary<string, InventoryView> Stores { get; }

    public LedgerTotals Seller { get; }

    /// <summary>The state now: each store's inventory and ledger, and BookSeller's ledger (read-only requests).</summary>
    public static Task<Reconciliation> ReadAsync(Deployment deployment, CancellationToken cancellationToken)
        => ReadAsync([.. deployment.Stores.Select(s => (s.Service, s.Url))], deployment.Seller.Url, cancellationToken, groups: deployment.ReplicationGroups);

    /// <summary>
    /// The state now of services wherever they run (the buyer command's deployment); a service that does not answer yet
    /// (restarting, recovering, draining: a connection error or a 503) is asked again, for at most <paramref name="patience"/>.
    /// </summary>
    public static async Task<Reconciliation> ReadAsync(IReadOnlyList<(string Name, Uri Url)> storeUrls, Uri seller, CancellationToken cancellationToken, TimeSpan? patience = null,
        IEnumerable<IEnumerable<Uri>>? groups = null)
    {
        // With replicas each read goes to its service's primary.
        using var http = new HttpClient(new PersistentServices.ReplicationGroupsHandler(groups ?? []) { InnerHandler = new SocketsHttpHandler() })
        {
            Timeout = TimeSpan.FromSeconds(30),
        };
        var deadline = DateTime.UtcNow + (patience ?? TimeSpan.Zero);
        async Task<T> GetAsync<T>(Uri url)
        {
            while (true)
            {
                try
                {
                    return (await http.GetFromJsonAsync<T>(url, Json, cancellationToken))!;
                }
                catch (HttpRequestException) when (DateTime.UtcNow < deadline)
                {
                    await Task.Delay(500, cancellationToken);
                }
            }
        }

        var stores = new Dictionary<string, InventoryView>(StringComparer.Ordinal);
        foreach (var (name, url) in storeUrls)
        {
            stores[name] = await GetAsync<InventoryView>(new Uri(url, "/inventory"));
        }

        var ledger = await GetAsync<LedgerTotals>(new Uri(seller, "/ledger"));
        return new Reconciliation(stores, ledger);
    }

    /// <summary>Every difference between <paramref name="after"/> − <paramref name="before"/> and what <paramref name="buyers"/> were told (together: the stores' counts are the sum of theirs).</summary>
    public static async Task<Result> CheckAsync(Reconciliation before, Reconciliation after, IReadOnlyList<BookBuyer> buyers, CancellationToken cancellationToken)
    {
        var mismatches = new List<string>();
        foreach (var buyer in buyers)
        {
            var basket = await buyer.ReadBasketAsync(cancellationToken);
            if (!basket.SequenceEqual(buyer.Basket))
            {
                mismatches.Add($"basket: BookSeller holds [{string.Join(", ", basket.Select(i => i.Store + "/" + i.BookId))}], the buyer was told [{string.Join(", ", buyer.Basket.Select(i => i.Store + "/" + i.BookId))}]");
            }
        }

        long storeExecutions = 0;
        long duplicates = after.Seller.Duplicates - before.Seller.Duplicates;
        foreach (var (name, view) in after.Stores)
        {
            var old = before.Stores[name].Books.ToDictionary(b => b.BookId, StringComparer.Ordinal);
            foreach (var book in view.Books)
            {
                var sold = book.Sold - old[book.BookId].Sold;
                var returned = book.Returned - old[book.BookId].Returned;
                var toldSold = buyers.Sum(b => b.Sold.GetValueOrDefault((name, book.BookId)));
                var toldReturned = buyers.Sum(b => b.Returned.GetValueOrDefault((name, book.BookId)));
                if (sold != toldSold || returned != toldReturned || book.InStock != book.Initial - book.Sold + book.Returned)
                {
                    mismatches.Add($"{name}/{book.BookId}: sold {sold} (told {toldSold}), returned {returned} (told {toldReturned}), in stock {book.InStock} of {book.Initial}");
                }
            }

            var executions = view.Ledger.Executions - before.Stores[name].Ledger.Executions;
            storeExecutions += executions;
            duplicates += view.Ledger.Duplicates - before.Stores[name].Ledger.Duplicates;
            var calls = buyers.Sum(b => b.StoreCalls.GetValueOrDefault(name));
            if (executions != calls)
            {
                mismatches.Add($"{name}: executed {executions} reserve/release calls, the buyer's acknowledged requests made {calls}");
            }
        }

        var sellerExecutions = after.Seller.Executions - before.Seller.Executions;
        var sellerRequests = buyers.Sum(b => b.SellerRequests);
        if (sellerExecutions != sellerRequests)
        {
            mismatches.Add($"bookseller: executed {sellerExecutions} basket requests, the buyers got {sellerRequests} replies");
        }

        if (buyers.Sum(b => b.Surprises) is > 0 and var surprises)
        {
            mismatches.Add($"the buyers saw {surprises} replies that contradicted earlier ones");
        }

        return new Result(mismatches, duplicates, storeExecutions, sellerExecutions);
    }

    public sealed record Result(IReadOnlyList<string> Mismatches, long Duplicates, long StoreExecutions, long SellerExecutions);
}
