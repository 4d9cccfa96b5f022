using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Logging;
using PersistentServices.Hosting;

namespace PersistentServices.Domain;

/// <summary>
/// The domain's recovery messages ([MSP §4.3], Fig. 12 "broadcast a recovery message"): once the service has started,
/// it asks every member for the recovered state numbers it knows (those broadcast while this service was down), and
/// tells every member its own, retrying each member until it acknowledged. Learned numbers trigger orphan recovery.
/// </summary>
internal sealed partial class DomainHostedService(PersistentRuntime runtime, OrphanRecovery orphans, IHostApplicationLifetime lifetime, ILogger<DomainHostedService> logger)
    : BackgroundService
{
    protected override async Task ExecuteAsync(CancellationToken stoppingToken)
    {
        var domain = runtime.Domain;
        if (!domain.Enabled)
        {
            return;
        }

        runtime.Orphans = orphans;
        domain.OnLearned = orphans.OnLearnedAsync;
        await WhenStartedAsync(stoppingToken).ConfigureAwait(false);
        if (!runtime.Availability.CanServe(RequestKind.BackgroundWork))
        {
            return;
        }

        // Variables and sessions that depend on what the log already says was lost (recovered state numbers logged before).
        foreach (var known in domain.Recovered.All.ToList())
        {
            await orphans.OnLearnedAsync(known).ConfigureAwait(false);
        }

        var pending = domain.Members.Keys.Where(m => m != domain.Self).ToHashSet(StringComparer.Ordinal);
        var pulled = new HashSet<string>(StringComparer.Ordinal);
        var delay = TimeSpan.FromMilliseconds(200);
        while (pending.Count > 0 || pulled.Count < domain.Members.Count - 1)
        {
            // Its own numbers first: they are what the members need to roll back what depended on this service's lost state.
            // A member that fails here is asked again in the next round; nothing ends this loop but every member's answer or
            // the host's stop (issue 49: members never heard of a recovery until the next restart).
            var own = domain.Recovered.All.Where(n => n.Service == domain.Self).ToList();
            foreach (var member in pending.ToList())
            {
                try
                {
                    if (own.Count == 0 || await domain.SendRecoveredAsync(member, own, stoppingToken).ConfigureAwait(false))
                    {
                        pending.Remove(member);
                        if (own.Count > 0)
                        {
                            Told(logger, member, own.Count);
                        }
                    }
                }
                catch (Exception ex) when (ex is not OperationCanceledException || !stoppingToken.IsCancellationRequested)
                {
                    ExchangeFailed(logger, member, ex);
                }
            }

            foreach (var member in domain.Members.Keys.Where(m => m != domain.Self && !pulled.Contains(m)).ToList())
            {
                try
                {
                    if (await domain.PullRecoveredAsync(member, stoppingToken).ConfigureAwait(false) is { } theirs)
                    {
                        await domain.LearnAsync(theirs, stoppingToken).ConfigureAwait(false);
                        pulled.Add(member);
                    }
                }
                catch (Exception ex) when (ex is not OperationCanceledException || !stoppingToken.IsCancellationRequested)
                {
                    ExchangeFailed(logger, member, ex);
                }
            }

            if (pending.Count > 0 || pulled.Count < domain.Members.Count - 1)
            {
                await Task.Delay(delay, stoppingToken).ConfigureAwait(false);
                delay = TimeSpan.FromMilliseconds(Math.Min(delay.TotalMilliseconds * 2, 5000));
            }
        }
    }

    private Task WhenStartedAsync(CancellationToken stoppingToken)
    {
        var started = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        lifetime.ApplicationStarted.Register(() => started.TrySetResult());
        return started.Task.WaitAsync(stoppingToken);
    }

    [LoggerMessage(1388, LogLevel.Warning, "Exchanging recovered state numbers with member '{Member}' failed; asked again in the next round")]
    private static partial void ExchangeFailed(ILogger logger, string member, Exception exception);

    [LoggerMessage(1373, LogLevel.Information, "Told member '{Member}' this service's {Count} recovered state numbers")]
    private static partial void Told(ILogger logger, string member, int count);
}
