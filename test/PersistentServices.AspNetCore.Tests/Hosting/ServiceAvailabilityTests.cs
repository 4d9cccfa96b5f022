using Microsoft.Extensions.DependencyInjection;
using PersistentServices.AspNetCore.Tests.TestSupport;
using PersistentServices.Domain;
using PersistentServices.Hosting;

namespace PersistentServices.AspNetCore.Tests.Hosting;

/// <summary>
/// <see cref="ServiceAvailability.CanServe"/> gives each kind of asker the test it had before issue 33 split the runtime:
/// new work not while draining, work the drain waits for (and reads of sessions) also while draining, calls' retries
/// until the drain's retry time. And the service domain's client comes from <c>IHttpClientFactory</c> as configured.
/// </summary>
public sealed class ServiceAvailabilityTests : IDisposable
{
    private static readonly RequestKind[] WhileDraining = [RequestKind.PersistentRequest, RequestKind.AdmittedRequest, RequestKind.SessionInspection, RequestKind.CallRetry];

    private readonly TempDirectory _dir = new();

    public void Dispose() => _dir.Dispose();

    [Fact]
    public async Task CanServe_Ready_EveryKind_Draining_OnlyWhatTheDrainWaitsFor()
    {
        await using var server = await TestServer.StartAsync(_dir.Path);
        var availability = server.Availability;
        Assert.Same(availability, server.Runtime.Availability);
        Assert.Contains(availability.Stage, new[] { RecoveryStage.Replaying, RecoveryStage.Ready }); // nothing to replay: Ready a moment later
        Assert.All(Enum.GetValues<RequestKind>(), kind => Assert.True(availability.CanServe(kind), kind.ToString()));

        availability.BeginDrain();

        Assert.True(availability.IsDraining);
        Assert.Null(availability.TryBeginExecution());
        Assert.All(Enum.GetValues<RequestKind>(), kind => Assert.Equal(WhileDraining.Contains(kind), availability.CanServe(kind)));
    }

    [Fact]
    public async Task CanServe_CallRetry_StopsAfterTheDrainRetryTime()
    {
        await using var server = await TestServer.StartAsync(_dir.Path, o => o.Calls.DrainRetryTime = TimeSpan.FromMilliseconds(50));
        var availability = server.Availability;
        availability.BeginDrain();
        await Task.Delay(200, TestContext.Current.CancellationToken);

        Assert.False(availability.CanServe(RequestKind.CallRetry));
        Assert.True(availability.CanServe(RequestKind.AdmittedRequest));
    }

    [Fact]
    public async Task DomainClient_FromTheFactory_WithTheFlushTimeout()
    {
        await using var server = await TestServer.StartAsync(_dir.Path, o => o.Domain.FlushTimeout = TimeSpan.FromSeconds(3));
        using var client = server.App.Services.GetRequiredService<IHttpClientFactory>().CreateClient(ServiceDomain.HttpClientName);
        Assert.Equal(TimeSpan.FromSeconds(3), client.Timeout);
    }

    [Fact]
    public async Task DomainClient_LeavesOut_TheHandlersTheApplicationAddsToEveryClient()
    {
        var sent = 0;
        await using var server = await TestServer.StartAsync(_dir.Path, build: b => b.Services.ConfigureHttpClientDefaults(
            client => client.AddHttpMessageHandler(() => new Counting(() => Interlocked.Increment(ref sent)))));
        var clients = server.App.Services.GetRequiredService<IHttpClientFactory>();
        var nowhere = new Uri("http://127.0.0.1:1/"); // refused at once

        using (var domain = clients.CreateClient(ServiceDomain.HttpClientName))
        {
            await Assert.ThrowsAsync<HttpRequestException>(() => domain.GetAsync(nowhere, TestContext.Current.CancellationToken));
        }

        Assert.Equal(0, Volatile.Read(ref sent));
        using (var other = clients.CreateClient("other"))
        {
            await Assert.ThrowsAsync<HttpRequestException>(() => other.GetAsync(nowhere, TestContext.Current.CancellationToken));
        }

        Assert.Equal(1, Volatile.Read(ref sent)); // the application's handler is there for its own clients
    }

    private sealed class Counting(Action onSend) : DelegatingHandler
    {
        protected override Task<HttpResponseMessage> SendAsync(HttpRequestMessage request, CancellationToken cancellationToken)
        {
            onSend();
            return base.SendAsync(request, cancellationToken);
        }
    }
}
