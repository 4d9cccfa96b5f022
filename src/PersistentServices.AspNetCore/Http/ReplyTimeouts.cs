using PersistentServices.Hosting;

namespace PersistentServices.Http;

/// <summary>
/// How long a client waits for its answer (<see cref="PersistentServicesOptions.ReplyTimeout"/>), for every path that may
/// wait for durability: a persistent request's execution (<see cref="PersistentRequestHandler"/>), a session start
/// (<see cref="Sessions.SessionStarter"/>) and a read-only request whose reply shows state not yet durable
/// (<see cref="ReadOnlyRequestHandler"/>). With synchronous replication, durable means held by the required replicas
/// too: while too few of them answer, each of these answers <c>503 reply-pending</c> after the timeout
/// (<see cref="ProtocolProblems.ReplyPendingAsync(Microsoft.AspNetCore.Http.HttpContext, string?)"/>) instead of waiting
/// as long as they are away. The timeouts run on the injected <see cref="TimeProvider"/>.
/// </summary>
internal static class ReplyTimeouts
{
    /// <summary>End clients wait <see cref="PersistentServicesOptions.ReplyTimeout"/>; a calling service (whose call retries on its own timeout) as long as it takes.</summary>
    public static TimeSpan For(PersistentRuntime runtime, bool fromService)
        => fromService ? Timeout.InfiniteTimeSpan : runtime.Options.EffectiveReplyTimeout;

    /// <summary>
    /// Waits for <paramref name="durable"/> at most <paramref name="timeout"/>: true once it completed (its failure is
    /// thrown), false when the timeout passed first. The wait itself goes on (a durable wait cannot be taken back); a
    /// failure it ends in later is observed here, never an unobserved task exception.
    /// </summary>
    public static async ValueTask<bool> WithinAsync(ValueTask durable, TimeSpan timeout, TimeProvider time)
    {
        if (durable.IsCompleted || timeout == Timeout.InfiniteTimeSpan)
        {
            await durable.ConfigureAwait(false);
            return true;
        }

        var task = durable.AsTask();
        try
        {
            await task.WaitAsync(timeout, time).ConfigureAwait(false);
            return true;
        }
        catch (TimeoutException) when (!task.IsCompleted)
        {
            _ = task.ContinueWith(static t => _ = t.Exception, CancellationToken.None, TaskContinuationOptions.OnlyOnFaulted | TaskContinuationOptions.ExecuteSynchronously,
                TaskScheduler.Default);
            return false;
        }
        catch (TimeoutException)
        {
            // It completed at that very moment: its outcome, not the timeout's.
            await task.ConfigureAwait(false);
            return true;
        }
    }
}
