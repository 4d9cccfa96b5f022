using System.Net.Http.Json;
using PersistentServices;

namespace Bookstore.Services;

/// <summary>
/// BookSeller ([Phoenix/App §5.5]): persistent; each buyer's basket is a <see cref="BasketManager"/>, a subordinate in
/// this process whose state is the buyer's session state here. Showing the basket is a read-only method when roles are
/// on (it asks the functional TaxCalculator, which costs no force either).
/// </summary>
internal static class BookSellerEndpoints
{
    /// <summary>The named client of TaxCalculator (registered with <c>AddPersistentCalls(TaxService)</c>).</summary>
    public const string TaxClient = "tax";

    /// <summary>TaxCalculator's service name (its <c>PersistentServices:ServiceName</c>): the client's calls are signed for it.</summary>
    public const string TaxService = "taxcalculator";

    public static void Map(WebApplication app, bool useRoles)
    {
        var ledger = new ExecutionLedger("BookSeller.Executions");

        app.MapPost("/basket/add", [Persistent] async (AddToBasket body, BasketManager basket, HttpContext context) =>
        {
            ledger.Record(context);
            return await basket.AddAsync(body.Store, body.BookId);
        });

        if (useRoles)
        {
            app.MapPost("/basket/show", [PersistentReadOnly] (ShowBasket body, BasketManager basket, IHttpClientFactory clients) => ShowAsync(body, basket, clients));
        }
        else
        {
            app.MapPost("/basket/show", [Persistent] (ShowBasket body, BasketManager basket, IHttpClientFactory clients) => ShowAsync(body, basket, clients));
        }

        app.MapPost("/basket/empty", [Persistent] async (BasketManager basket, HttpContext context) =>
        {
            ledger.Record(context);
            return await basket.EmptyAsync();
        });

        // For the launcher's reconciliation: the basket as BookSeller holds it, and its ledger. Not logged.
        app.MapGet("/basket", [PersistentReadOnly] (BasketManager basket) => basket.Contents().Items);
        app.MapGet("/ledger", [PersistentReadOnly] () => ledger.Read());
    }

    private static async Task<BasketView> ShowAsync(ShowBasket body, BasketManager basket, IHttpClientFactory clients)
    {
        var (items, subtotal) = basket.Contents();
        using var reply = await clients.CreateClient(TaxClient).PostAsJsonAsync("/tax", new TaxRequest(body.Region, subtotal));
        reply.EnsureSuccessStatusCode();
        var tax = await reply.Content.ReadFromJsonAsync<TaxResult>() ?? throw new InvalidOperationException("TaxCalculator answered an empty body");
        return new BasketView(items, subtotal, tax.Rate, tax.Tax, subtotal + tax.Tax);
    }
}
