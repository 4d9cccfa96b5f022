using PersistentServices.AspNetCore.Tests.TestSupport;
using PersistentServices.Replication;

namespace PersistentServices.AspNetCore.Tests.Replication;

/// <summary>
/// Lag as health (docs/replication.md, "Health"): a replica's lag in time as the primary measures it
/// (<see cref="ReplicaLag"/>, on the injected clock), and what <see cref="ReplicationHealth"/> makes of it and of a hot
/// follower's replay lag against <see cref="ReplicationOptions.MaxHealthyLag"/>, logged once on entering and once on
/// leaving the lagging state.
/// </summary>
public sealed class ReplicationHealthTests
{
    private static readonly TimeSpan Max = TimeSpan.FromSeconds(5);

    [Fact]
    public void ReplicaLag_IsTheAgeOfTheOldestCommitTheReplicaDoesNotHold_AndZeroOnceItHoldsThemAll()
    {
        var time = new ManualTimeProvider(DateTimeOffset.UnixEpoch);
        var lag = new ReplicaLag(time);
        Assert.Equal(TimeSpan.Zero, lag.Lag);

        lag.LocallyDurable(100);
        time.Advance(TimeSpan.FromSeconds(2));
        lag.LocallyDurable(200);
        time.Advance(TimeSpan.FromSeconds(3));
        Assert.Equal(TimeSpan.FromSeconds(5), lag.Lag);

        lag.Held(100); // the first commit: the second is 3 s old
        Assert.Equal(TimeSpan.FromSeconds(3), lag.Lag);

        lag.Held(200);
        Assert.Equal(TimeSpan.Zero, lag.Lag);
        lag.LocallyDurable(150); // nothing new
        Assert.Equal(TimeSpan.Zero, lag.Lag);
    }

    [Fact]
    public void ReplicaLag_PastItsSamples_OnlyEverLooksLonger()
    {
        var time = new ManualTimeProvider(DateTimeOffset.UnixEpoch);
        var lag = new ReplicaLag(time);
        for (var i = 1; i <= ReplicaLag.MaxSamples + 10; i++)
        {
            lag.LocallyDurable(i);
            time.Advance(TimeSpan.FromMilliseconds(1));
        }

        lag.Held(ReplicaLag.MaxSamples - 1);
        Assert.True(lag.Lag >= TimeSpan.FromMilliseconds(11), $"lag {lag.Lag}");
        lag.Held(ReplicaLag.MaxSamples + 10);
        Assert.Equal(TimeSpan.Zero, lag.Lag);
    }

    [Fact]
    public void APrimary_LagsWhenFewerThanItsRequiredReplicasAreWithinMaxHealthyLag()
    {
        Assert.Null(ReplicationHealth.LaggingReplicas(1, [("a", TimeSpan.FromSeconds(9)), ("b", TimeSpan.FromSeconds(1))], Max));
        var reason = ReplicationHealth.LaggingReplicas(2, [("a", TimeSpan.FromSeconds(9)), ("b", TimeSpan.FromSeconds(1))], Max);
        Assert.NotNull(reason);
        Assert.Contains("a 9000 ms behind", reason, StringComparison.Ordinal);
        Assert.DoesNotContain("b 1000", reason, StringComparison.Ordinal);
        Assert.NotNull(ReplicationHealth.LaggingReplicas(1, [("a", TimeSpan.FromSeconds(6))], Max));
        Assert.Null(ReplicationHealth.LaggingReplicas(1, [("a", Max)], Max));
        Assert.Null(ReplicationHealth.LaggingReplicas(0, [("a", TimeSpan.FromHours(1))], Max)); // asynchronous: nothing waits for it
        Assert.Null(ReplicationHealth.HeldBack(1, 2, 1));
        Assert.NotNull(ReplicationHealth.HeldBack(1, 2, 0));
    }

    [Fact]
    public void AReplica_LagsWhenItsHotFollowerIsBehindLongerThanMaxHealthyLag()
    {
        Assert.Null(ReplicationHealth.LaggingFollower(Max, 3, Max));
        var reason = ReplicationHealth.LaggingFollower(TimeSpan.FromSeconds(8), 3, Max);
        Assert.NotNull(reason);
        Assert.Contains("8000 ms", reason, StringComparison.Ordinal);
        Assert.Contains("3 answered requests", reason, StringComparison.Ordinal);
    }

    [Fact]
    public void EnteringAndLeavingTheLaggingState_IsLoggedOnceEach_NotOnEveryCheck()
    {
        using var logs = new ListLoggerProvider();
        var health = new ReplicationHealth(null!, new Microsoft.Extensions.Logging.Logger<ReplicationHealth>(new Microsoft.Extensions.Logging.LoggerFactory([logs])));
        Assert.Null(health.Note(ReplicationRole.Replica, null, Max));
        for (var i = 0; i < 3; i++)
        {
            Assert.Equal("behind", health.Note(ReplicationRole.Replica, "behind", Max));
        }

        Assert.True(health.IsLagging);
        Assert.Null(health.Note(ReplicationRole.Replica, null, Max));
        Assert.Null(health.Note(ReplicationRole.Replica, null, Max));
        Assert.False(health.IsLagging);
        Assert.Single(logs.Messages(1456));
        Assert.Contains("behind", logs.Messages(1456)[0], StringComparison.Ordinal);
        Assert.Single(logs.Messages(1457));
    }

    [Theory]
    [InlineData(0)]
    [InlineData(-1000)]
    public void MaxHealthyLag_MustBePositive_CheckedAtStartup(int milliseconds)
    {
        var options = new PersistentServicesOptions { LogDirectory = "unused", ServiceName = "orders" };
        options.Calls.PeerKey = "replication-health-test-peer-key-0123456789";
        options.Replication.Role = ReplicationRole.Primary;
        options.Replication.Replicas.Add(new Uri("http://127.0.0.1:1/"));
        var validator = new PersistentServices.Hosting.PersistentServicesOptionsValidator();
        Assert.DoesNotContain("MaxHealthyLag", validator.Validate(null, options).FailureMessage ?? "", StringComparison.Ordinal);
        Assert.Equal(TimeSpan.FromSeconds(5), options.Replication.MaxHealthyLag);

        options.Replication.MaxHealthyLag = TimeSpan.FromMilliseconds(milliseconds);
        var result = validator.Validate(null, options);
        Assert.True(result.Failed);
        Assert.Contains("PersistentServicesOptions.Replication.MaxHealthyLag must be positive", result.FailureMessage, StringComparison.Ordinal);
    }
}
