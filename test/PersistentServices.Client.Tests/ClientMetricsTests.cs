using System.Collections.Concurrent;
using System.Diagnostics.Metrics;

namespace PersistentServices.Client.Tests;

/// <summary>The client's meter, <c>PersistentServices.Client</c>, read with a <see cref="MeterListener"/> (filtered to this test's named client).</summary>
public sealed class ClientMetricsTests : IDisposable
{
    private readonly TempDirectory _dir = new();
    private readonly FakeSessionServer _server = new();
    private readonly string _name = "metrics-" + Guid.NewGuid().ToString("N")[..6];
    private readonly ConcurrentDictionary<string, double> _sums = new();
    private readonly ConcurrentDictionary<string, int> _records = new();
    private readonly MeterListener _listener = new();

    public ClientMetricsTests()
    {
        _listener.InstrumentPublished = (instrument, listener) =>
        {
            if (instrument.Meter.Name == "PersistentServices.Client")
            {
                listener.EnableMeasurementEvents(instrument);
            }
        };
        _listener.SetMeasurementEventCallback<long>((instrument, value, tags, _) => Add(instrument, value, tags));
        _listener.SetMeasurementEventCallback<double>((instrument, value, tags, _) => Add(instrument, value, tags));
        _listener.Start();
    }

    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    private void Add(Instrument instrument, double value, ReadOnlySpan<KeyValuePair<string, object?>> tags)
    {
        foreach (var tag in tags)
        {
            if (tag.Key == "client" && (string?)tag.Value == _name)
            {
                _sums.AddOrUpdate(instrument.Name, value, (_, sum) => sum + value);
                _records.AddOrUpdate(instrument.Name, 1, (_, n) => n + 1);
            }
        }
    }

    public void Dispose()
    {
        _listener.Dispose();
        _server.Dispose();
        _dir.Dispose();
    }

    [Fact]
    public async Task Instruments_CallsRetriesRecoveryAndStop_Counted()
    {
        await using (var host = ClientHost.Start(_dir.Path, _server, options => options.MaxRetryAttempts = 2, name: _name))
        {
            await host.PostAsync("a");
            _server.LoseRepliesNext = 1;
            await host.PostAsync("b"); // one retry
            _server.UnavailableNext = 3;
            await Assert.ThrowsAsync<HttpRequestException>(() => host.PostAsync("c", operationId: "c")); // two retries, then pending
        }

        await using (var host = ClientHost.Start(_dir.Path, _server, name: _name))
        {
            await foreach (var _ in host.Client.RecoverAsync(Ct))
            {
            }
        }

        Assert.Equal(3, _sums["persistentservices.client.requests.sent"]);
        Assert.Equal(4, _sums["persistentservices.client.retries"]); // 1 + 2, and the resend by RecoverAsync
        Assert.Equal(3, _sums["persistentservices.client.replies.stored"]);
        Assert.Equal(1, _sums["persistentservices.client.replies.recovered"]);
        Assert.Equal(1, _sums["persistentservices.client.sessions.closed"]);
        Assert.Equal(2, _records["persistentservices.client.request.duration"]); // the calls that returned a reply
        Assert.True(_sums["persistentservices.client.request.duration"] > 0);
    }
}
