using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Hosting;
using PersistentServices.Hosting;

namespace PersistentServices.AspNetCore.Tests.Hosting;

/// <summary>
/// The runtime makes one service domain and one peer authentication, whoever asks first and however many ask at once.
/// Issue 49: a member killed during a domain kill test came back with two domains (a member's flush raced recovery's first
/// use of the lazily made one); recovery learned its recovered state numbers into one, the domain endpoints answered from
/// the other, refused every flush of the member's previous epoch (event 1384) and the domain made no progress for minutes.
/// </summary>
public sealed class PersistentRuntimeTests
{
    [Fact]
    public async Task TheDomainAndThePeers_AreOneEach_WhenManyThreadsAskFirstAtOnce()
    {
        const int Threads = 8;
        for (var round = 0; round < 20; round++)
        {
            var builder = Host.CreateEmptyApplicationBuilder(new HostApplicationBuilderSettings());
            builder.Services.AddPersistentServices(options =>
            {
                options.LogDirectory = Path.GetTempPath();
                options.ServiceName = "A";
                options.Calls.PeerKey = "runtime-test-peer-key-0123456789abcdef";
                options.Domain.Members["A"] = new Uri("http://127.0.0.1:1/");
                options.Domain.Members["B"] = new Uri("http://127.0.0.1:2/");
            });
            using var host = builder.Build();
            var runtime = host.Services.GetRequiredService<PersistentRuntime>();

            using var start = new Barrier(Threads);
            var seen = await Task.WhenAll(Enumerable.Range(0, Threads).Select(_ => Task.Factory.StartNew(() =>
            {
                start.SignalAndWait(TestContext.Current.CancellationToken);
                return ((object)runtime.Domain, (object)runtime.Peers);
            }, TestContext.Current.CancellationToken, TaskCreationOptions.LongRunning, TaskScheduler.Default)));

            Assert.Single(seen.Select(s => s.Item1).Distinct());
            Assert.Single(seen.Select(s => s.Item2).Distinct());
            Assert.Same(runtime.Domain, seen[0].Item1);
        }
    }
}
