using System.Diagnostics.Metrics;
using System.Net;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Diagnostics.Metrics.Testing;
using PersistentServices.AspNetCore.Tests.TestSupport;

namespace PersistentServices.AspNetCore.Tests.Diagnostics;

/// <summary>The service's meter comes from its host's <see cref="IMeterFactory"/>: two services in one process count apart.</summary>
public sealed class PersistentServicesMetricsTests : IDisposable
{
    private readonly TempDirectory _dir = new();

    public void Dispose() => _dir.Dispose();

    [Fact]
    public async Task Requests_TwoServicesInOneProcess_EachMeterCountsItsOwn()
    {
        await using var a = await TestServer.StartAsync(Path.Combine(_dir.Path, "a"));
        await using var b = await TestServer.StartAsync(Path.Combine(_dir.Path, "b"));
        using var requestsA = new MetricCollector<long>(a.App.Services.GetRequiredService<IMeterFactory>(), "PersistentServices", "persistentservices.requests");
        using var requestsB = new MetricCollector<long>(b.App.Services.GetRequiredService<IMeterFactory>(), "PersistentServices", "persistentservices.requests");
        using var appendsA = new MetricCollector<long>(a.App.Services.GetRequiredService<IMeterFactory>(), "PersistentServices", "persistentservices.log.appends");
        var sessionA = await a.StartSessionAsync();
        var sessionB = await b.StartSessionAsync();

        for (var i = 1; i <= 3; i++)
        {
            Assert.Equal(HttpStatusCode.OK, (await a.SendAsync(HttpMethod.Post, "/counter/add", sessionA, i, new { opId = "a" + i, amount = 1 })).Response.StatusCode);
        }

        Assert.Equal(HttpStatusCode.OK, (await b.SendAsync(HttpMethod.Post, "/counter/add", sessionB, 1, new { opId = "b1", amount = 1 })).Response.StatusCode);
        Assert.Equal(HttpStatusCode.OK, (await b.SendAsync(HttpMethod.Post, "/counter/add", sessionB, 1, new { opId = "b1", amount = 1 })).Response.StatusCode); // a retry

        Assert.Equal(3, Count(requestsA, "executed"));
        Assert.Equal(0, Count(requestsA, "duplicate"));
        Assert.Equal(1, Count(requestsB, "executed"));
        Assert.Equal(1, Count(requestsB, "duplicate"));
        Assert.True(appendsA.GetMeasurementSnapshot().Sum(m => m.Value) >= 3, "A's log appended its requests' records");
    }

    private static long Count(MetricCollector<long> requests, string outcome)
        => requests.GetMeasurementSnapshot().Where(m => Equals(m.Tags["outcome"], outcome)).Sum(m => m.Value);
}
