using System.Net.Http.Json;
using Microsoft.Extensions.Http;

namespace Bookstore.Services;

/// <summary>
/// A typed client of one Bookstore service. Registered once per store with <c>AddHttpClient&lt;StoreClient&gt;(name)
/// .AddPersistentCalls()</c>: inside a persistent request its calls are persistent calls (docs/calls.md) to the store
/// that client's name names, and the analyzer knows the <see cref="HttpClient"/> injected here is such a client.
/// </summary>
internal sealed class StoreClient(HttpClient http)
{
    public async Task<SearchResult> SearchAsync(string keyword)
        => await ReadAsync<SearchResult>(await http.PostAsJsonAsync("/search", new SearchRequest(keyword)));

    public async Task<ReserveResult> ReserveAsync(string bookId)
        => await ReadAsync<ReserveResult>(await http.PostAsJsonAsync("/reserve", new BookRef(bookId)));

    public async Task<ReleaseResult> ReleaseAsync(string bookId)
        => await ReadAsync<ReleaseResult>(await http.PostAsJsonAsync("/release", new BookRef(bookId)));

    private static async Task<T> ReadAsync<T>(HttpResponseMessage response)
    {
        using (response)
        {
            response.EnsureSuccessStatusCode();
            return await response.Content.ReadFromJsonAsync<T>()
                   ?? throw new InvalidOperationException($"{response.RequestMessage?.RequestUri} answered an empty body");
        }
    }
}

/// <summary>The stores this component calls, by name: a <see cref="StoreClient"/> on the named client of each.</summary>
internal sealed class StoreDirectory(ComponentSettings settings, IHttpClientFactory clients, ITypedHttpClientFactory<StoreClient> typed)
{
    private readonly IReadOnlyList<string> _names = settings.ParseStores().Select(s => s.Name).ToList();

    /// <summary>The stores, in the launcher's order.</summary>
    public IReadOnlyList<string> Names => _names;

    public StoreClient Get(string store)
        => _names.Contains(store, StringComparer.Ordinal)
            ? typed.CreateClient(clients.CreateClient(store))
            : throw new KeyNotFoundException($"No store named '{store}'.");
}
