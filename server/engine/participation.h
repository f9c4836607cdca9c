// Participation: what a Collective asks its job about the ranks of its
// group that have not attached: whether each one is left out of the job's
// collectives now. The job answers from its membership; the engine knows
// nothing else of it.
//
// The Collective asks only inside the calls that hand it a Participation
// (Collective::StartQuorum, Collective::OnMembershipChanged) and keeps no
// reference to it: the job makes those calls under its own lock, which is
// what keeps the answers consistent, so an implementation takes no lock
// and calls nothing back.
#ifndef REDUCER_SERVER_ENGINE_PARTICIPATION_H_
#define REDUCER_SERVER_ENGINE_PARTICIPATION_H_

namespace reducer {

class Participation {
 public:
  // True while `rank` is left out for having called Done(): until every
  // rank of the job has, it takes part in no collective but DONE.
  virtual bool CalledDone(int rank) const = 0;
  // True while `rank` is gone from the running epoch: departed, lost, or
  // (in quorum mode) absent. A quorum step goes on without it; it may come
  // back, but a step that counted it as gone keeps doing so.
  virtual bool Gone(int rank) const = 0;

 protected:
  ~Participation() = default;
};

}  // namespace reducer

#endif  // REDUCER_SERVER_ENGINE_PARTICIPATION_H_
