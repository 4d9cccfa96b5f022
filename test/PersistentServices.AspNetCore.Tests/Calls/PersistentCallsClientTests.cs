using Microsoft.Extensions.DependencyInjection;
using PersistentServices.AspNetCore.Tests.TestSupport;

namespace PersistentServices.AspNetCore.Tests.Calls;

/// <summary>What <c>AddPersistentCalls()</c> does to the client it is added to (docs/calls.md, condition 4).</summary>
public sealed class PersistentCallsClientTests : IDisposable
{
    private readonly TempDirectory _dir = new();

    public void Dispose() => _dir.Dispose();

    /// <summary>
    /// Issue 38: the named client kept .NET's default <c>HttpClient.Timeout</c> of 100 s, which cut off a call to a callee
    /// down for longer and made the cancellation the request's logged outcome. The client's timeout is infinite now, also
    /// when the application set one before <c>AddPersistentCalls()</c> (a timeout set after it is ignored by the call itself:
    /// the process test <c>CalleeDownLongerThanTheClientTimeout...</c>).
    /// </summary>
    [Fact]
    public async Task AddPersistentCalls_TheClientsTimeoutIsInfinite_WhateverTheApplicationSetBefore()
    {
        await using var server = await TestServer.StartAsync(_dir.Path, build: builder =>
        {
            builder.Services.AddHttpClient("default-timeout").AddPersistentCalls();
            builder.Services.AddHttpClient("own-timeout", c => c.Timeout = TimeSpan.FromSeconds(3)).AddPersistentCalls();
            builder.Services.AddHttpClient("plain");
        });
        var clients = server.App.Services.GetRequiredService<IHttpClientFactory>();

        Assert.Equal(Timeout.InfiniteTimeSpan, clients.CreateClient("default-timeout").Timeout);
        Assert.Equal(Timeout.InfiniteTimeSpan, clients.CreateClient("own-timeout").Timeout);
        Assert.Equal(TimeSpan.FromSeconds(100), clients.CreateClient("plain").Timeout);
    }
}
