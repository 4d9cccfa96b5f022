using System.Net;
using System.Net.Http.Json;
using PersistentServices.Sample;

namespace PersistentServices.Testing.Tests;

/// <summary>samples/PersistentServices.Sample through the test kit: its cart and counter through kill -9.</summary>
public sealed class SampleTests
{
    private static CancellationToken Cancel => TestContext.Current.CancellationToken;

    [Fact]
    public async Task Cart_SurvivesKill9_AndTheLastRequestIsAnsweredFromTheLog()
    {
        await using var app = await PersistentApp.StartAsync<CounterSession>(o => o.ReadinessPath = "/health/ready", Cancel);
        var session = await app.StartSessionAsync(cancellationToken: Cancel);
        using (var first = await session.PostAsJsonAsync("/cart/items", new { sku = "book-42", quantity = 2 }, Cancel))
        {
            Assert.Equal(HttpStatusCode.OK, first.StatusCode);
        }

        using var second = await session.PostAsJsonAsync("/cart/items", new { sku = "pen", quantity = 1 }, Cancel);
        var reply = await second.Content.ReadAsStringAsync(Cancel);

        await app.CrashAsync(Cancel);
        await app.RestartAsync(Cancel);

        using var retry = await session.ResendAsync(Cancel);
        Assert.Equal("true", retry.Headers.GetValues("PS-Replayed").Single());
        Assert.Equal(reply, await retry.Content.ReadAsStringAsync(Cancel));
        using var cart = await session.GetAsync("/cart", Cancel);
        var view = await cart.Content.ReadFromJsonAsync<CartViewDto>(Cancel);
        Assert.Equal(3, view!.Items);
    }

    private sealed record CartViewDto(int Items);
}
