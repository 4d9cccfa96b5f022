using System.Globalization;
using System.Net;
using System.Net.Http.Json;
using System.Text.Json;

namespace PersistentServices.ProcessTests;

/// <summary>
/// <c>Idempotency-Key</c> requests (a client without sessions, as curl sends them) against the test service as a real
/// process that is killed with SIGKILL and restarted on the same log; the effect is checked in the service's shared
/// balances from the client side.
/// </summary>
[Trait("Category", "Process")]
public sealed class IdempotencyKeyTests : IDisposable
{
    private readonly TempDirectory _dir = new();

    private static CancellationToken Ct => TestContext.Current.CancellationToken;

    public void Dispose() => _dir.Dispose();

    private static async Task<(HttpStatusCode Status, byte[] Bytes, HttpResponseMessage Response)> DepositAsync(HttpClient client, string key, string account, long amount)
    {
        using var request = new HttpRequestMessage(HttpMethod.Post, "/deposit") { Content = JsonContent.Create(new { account, amount }) };
        request.Headers.TryAddWithoutValidation("Idempotency-Key", key);
        var response = await client.SendAsync(request, Ct);
        return (response.StatusCode, await response.Content.ReadAsByteArrayAsync(Ct), response);
    }

    private static async Task<long> BalanceAsync(ServiceProcess service, string account)
    {
        var (status, body, _) = await service.SendAsync(HttpMethod.Get, "/balances", null, null);
        Assert.Equal(HttpStatusCode.OK, status);
        return body.TryGetProperty(account, out var balance) ? balance.GetInt64() : 0;
    }

    [Fact]
    public async Task KeyRequest_RepeatAfterKill9AndRestarts_GetsTheSameBytes_AndTheDepositRanOnce()
    {
        var environment = new Dictionary<string, string> { ["PS_LOG_DIR"] = _dir.File("log") };
        byte[] first;
        int port;
        await using (var service = await ServiceProcess.StartAsync(environment))
        {
            port = service.Port;
            var (status, bytes, _) = await DepositAsync(service.Client, "op-7f3a", "a", 5);
            Assert.Equal(HttpStatusCode.OK, status);
            first = bytes;
            await service.KillAsync();
        }

        for (var restart = 1; restart <= 2; restart++)
        {
            await using var service = await ServiceProcess.StartAsync(environment, port);
            var (status, bytes, response) = await DepositAsync(service.Client, "op-7f3a", "a", 5);
            var (reused, reusedBytes, _) = await DepositAsync(service.Client, "op-7f3a", "a", 6);

            Assert.Equal(HttpStatusCode.OK, status);
            Assert.Equal(first, bytes);
            Assert.Equal("true", response.Headers.GetValues("PS-Replayed").Single());
            Assert.Equal(HttpStatusCode.UnprocessableEntity, reused);
            Assert.Equal("urn:persistentservices:problem:idempotency-key-reused",
                JsonDocument.Parse(reusedBytes).RootElement.GetProperty("type").GetString());
            Assert.Equal(5, await BalanceAsync(service, "a"));
            await service.KillAsync();
        }
    }

    [Fact]
    public async Task KeyRequests_InFlightWhenKilled_RetriedWithTheirKeys_EachDepositsExactlyOnce()
    {
        const int Count = 120;
        var environment = new Dictionary<string, string> { ["PS_LOG_DIR"] = _dir.File("log") };
        var keys = Enumerable.Range(1, Count).Select(i => "dep-" + i.ToString(CultureInfo.InvariantCulture)).ToArray();
        var answered = new Dictionary<string, byte[]>();
        int port;
        await using (var service = await ServiceProcess.StartAsync(environment))
        {
            port = service.Port;

            // Four callers, one deposit at a time each; the service is killed after about 30 replies: some replied, some in
            // flight, some never sent.
            var replied = 0;
            var queue = new System.Collections.Concurrent.ConcurrentQueue<string>(keys);
            var results = new System.Collections.Concurrent.ConcurrentBag<(string Key, HttpStatusCode Status, byte[] Bytes)>();
            var workers = Enumerable.Range(0, 4).Select(_ => Task.Run(async () =>
            {
                while (queue.TryDequeue(out var key))
                {
                    try
                    {
                        var (status, bytes, _) = await DepositAsync(service.Client, key, "b", 1);
                        results.Add((key, status, bytes));
                        Interlocked.Increment(ref replied);
                    }
                    catch (Exception ex) when (ex is HttpRequestException or IOException or TaskCanceledException)
                    {
                        return; // the kill: this key's request was in flight
                    }
                }
            }, Ct)).ToList();
            for (var wait = 0; Volatile.Read(ref replied) < 30 && wait < 5000; wait++)
            {
                await Task.Delay(1, Ct);
            }

            await service.KillAsync();
            await Task.WhenAll(workers);
            foreach (var (key, status, bytes) in results)
            {
                if (status == HttpStatusCode.OK)
                {
                    answered[key] = bytes;
                }
            }
        }

        await using (var service = await ServiceProcess.StartAsync(environment, port))
        {
            // The client retries every deposit with its key until it has a reply (409 while one still runs).
            foreach (var key in keys)
            {
                var (status, bytes, _) = await DepositAsync(service.Client, key, "b", 1);
                for (var attempt = 0; status == HttpStatusCode.Conflict && attempt < 50; attempt++)
                {
                    await Task.Delay(100, Ct);
                    (status, bytes, _) = await DepositAsync(service.Client, key, "b", 1);
                }

                Assert.Equal(HttpStatusCode.OK, status);
                if (answered.TryGetValue(key, out var before))
                {
                    Assert.Equal(before, bytes);
                }
            }

            Assert.Equal(Count, await BalanceAsync(service, "b"));
        }

        TestContext.Current.TestOutputHelper?.WriteLine($"keys answered before the kill: {answered.Count} of {Count}");
    }

    [Fact]
    public async Task KeyRequests_ThroughAProxyThatCutsConnections_RetriedWithTheirKeys_EachDepositsOnce()
    {
        const int Count = 30;
        await using var service = await ServiceProcess.StartAsync(new Dictionary<string, string> { ["PS_LOG_DIR"] = _dir.File("log") });
        await using var proxy = new LoopbackProxy(service.Port, cutProbability: 0.3, seed: 7);
        using var client = new HttpClient { BaseAddress = new Uri($"http://127.0.0.1:{proxy.Port}"), Timeout = TimeSpan.FromSeconds(10) };
        var attempts = 0;

        // A generic client: one key per deposit, the same key again after a dropped connection or a 409, until a reply.
        for (var i = 1; i <= Count; i++)
        {
            var key = "cut-" + i.ToString(CultureInfo.InvariantCulture);
            HttpStatusCode status = 0;
            for (var attempt = 0; status != HttpStatusCode.OK && attempt < 50; attempt++)
            {
                attempts++;
                try
                {
                    (status, _, _) = await DepositAsync(client, key, "c", 1);
                }
                catch (Exception ex) when (ex is HttpRequestException or IOException or TaskCanceledException)
                {
                    status = 0;
                }
            }

            Assert.Equal(HttpStatusCode.OK, status);
        }

        Assert.Equal(Count, await BalanceAsync(service, "c"));
        Assert.True(proxy.Cuts > 0, "the proxy cut no connection");
        TestContext.Current.TestOutputHelper?.WriteLine($"connections cut: {proxy.Cuts}, attempts: {attempts} for {Count} deposits");
    }
}
