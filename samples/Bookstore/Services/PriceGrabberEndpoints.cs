using PersistentServices;

namespace Bookstore.Services;

/// <summary>
/// PriceGrabber ([Phoenix/App §5.5]): a keyword search over every store, cheapest first. A read-only component when
/// roles are on: it changes nothing, so it logs nothing and its calls carry no id (its stores' searches are read-only
/// too). Without roles it is persistent, like every component of the paper's baseline.
/// </summary>
internal static class PriceGrabberEndpoints
{
    public static void Map(WebApplication app, bool useRoles)
    {
        if (useRoles)
        {
            app.MapPost("/search", [PersistentReadOnly] (SearchRequest query, StoreDirectory stores) => SearchAsync(query, stores));
        }
        else
        {
            app.MapPost("/search", [Persistent] (SearchRequest query, StoreDirectory stores) => SearchAsync(query, stores));
        }
    }

    /// <summary>Asks each store in turn (one call at a time: a persistent request's calls are numbered in order).</summary>
    private static async Task<SearchResult> SearchAsync(SearchRequest query, StoreDirectory stores)
    {
        var offers = new List<Offer>();
        foreach (var store in stores.Names)
        {
            offers.AddRange((await stores.Get(store).SearchAsync(query.Keyword)).Offers);
        }

        return new SearchResult([.. offers.OrderBy(o => o.Price).ThenBy(o => o.Store, StringComparer.Ordinal).ThenBy(o => o.BookId, StringComparer.Ordinal)]);
    }
}
